"""What a router costs per request: the harness, its load client, the null upstream, the peer routers."""
