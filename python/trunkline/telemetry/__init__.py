"""OpenTelemetry traces and metrics of the parent side (the host and the gateway): see
``parent.telemetry.Telemetry`` (a host's), ``calls.CallRecord`` (one request's), ``served``
(the gateway's side: a request it serves, the context of an HTTP request's headers),
``conventions`` (the names, pure), ``sdk`` (the SDK and exporters ``trunkline serve``
sets up from ``OTEL_*``, and the Prometheus page; needs ``trunkline[otel]``) and ``audit``
(the gateway's audit trail: a record per decision, to a file, stderr or OpenTelemetry
logs).

Nothing is imported here: the call path imports ``calls`` alone."""
