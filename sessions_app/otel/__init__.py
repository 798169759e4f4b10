"""OTLP ingest: OpenTelemetry traces of agent runs in, session-log events out (docs/otlp.md).

`mapping/` is the pure part (decoding, reading spans by convention, planning
events); the endpoint beside it is a thin door onto `services.ingest_spans`.
"""
