"""A lean HTTP/1.1 layer for the gateway's data path: asyncio Protocols over ``httptools`` (llhttp).

``server`` accepts client connections and hands each complete request to a handler with a
``writer`` to answer on; ``client`` (the upstream pool) speaks to the model servers.
"""
