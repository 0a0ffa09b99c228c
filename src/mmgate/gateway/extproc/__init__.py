"""mmgate as the endpoint picker of an Envoy-based inference gateway (Envoy's ext_proc protocol).

The Gateway API Inference Extension's endpoint-picker protocol: Envoy streams each request's
headers and body to this server over gRPC, the request controller decides where it goes (the same
controller the HTTP gateway uses), and the answer is a destination header Envoy's load balancer
honours. :mod:`.messages` builds the protocol's messages, :mod:`.stream` follows one request,
:mod:`.server` serves the gRPC service, its health and the admin HTTP port, :mod:`.envoy_config`
renders a matching Envoy configuration.
"""
