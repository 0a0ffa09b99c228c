"""A lean HTTP/1.1 layer over ``httptools`` (llhttp), shared by the gateway and the sidecar.

``server`` accepts client connections and hands each complete request to a handler with a
``writer`` to answer on; ``client`` (the upstream pool) speaks to the model servers; ``headers``
holds the hop-by-hop and request-id rules both relays follow; ``responses`` the response values
and the OpenAI-shaped error body. Nothing here imports the gateway, the controller or scheduling.
"""
