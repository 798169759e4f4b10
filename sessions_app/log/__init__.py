"""The session log's semantics in plain Python (no Django): events, fold, recovery, fork, blob.

Follows /work/shared/spec/session-log.md; storage and the API build on these functions.
"""
