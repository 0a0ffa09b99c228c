"""Helpers shared by more than one test folder, as a package: a test imports ``support.x``.

``tests/`` is on ``sys.path`` because pytest puts a rootdir ``conftest.py``'s folder there, so no
helper edits ``sys.path``. ``upstreams``: scriptable upstreams, a recording router, a started
gateway; ``stack``: the simulated fleet plus a gateway built as ``mmgate serve`` builds it;
``probes``: error-shape checks, a stack config, raw-socket clients and pod counters;
``redis_server``: a real redis-server on a free loopback port; ``processes``: subprocesses that run
this checkout's code; ``h1``: raw-socket peers for the upstream HTTP/1.1 client; ``envoy``: a real
Envoy in front of ``mmgate extproc``; ``bodies``/``media``: request bodies and media files;
``waiting``: ``until``, the one poll for what a background task makes true; ``scheduling``,
``engine``, ``views``, ``hfref``, ``kubeapi``: builders for the scheduler, the simulator engine,
request views, the transformers reference and a fake Kubernetes API.
"""
