"""The JSON API (api.md): thin endpoints over services and selectors. app.py is the
NinjaAPI (authentication, parser, error answers); each resource has its module and router."""
