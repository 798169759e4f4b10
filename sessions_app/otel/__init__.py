"""The pure side of OTLP ingest: no Django, tested directly (docs/internals/otlp.md).

decode: request bodies (protobuf or JSON, gzip or not) into `Span`s;
conventions: what a span says in Turnlog's terms (a `Reading`), by family;
planner: the events a session's log gets for the readings that arrive.
"""
