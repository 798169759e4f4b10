"""The JSON API (api.md), moved into this package to be split by resource (issue 25);
until then app.py holds all of it and this re-exports its names."""

from sessions_app.api.app import *  # noqa: F403
