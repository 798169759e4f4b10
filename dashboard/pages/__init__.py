"""The server-rendered screens of the dashboard and the helpers they share."""
