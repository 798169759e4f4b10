import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from sessions_app import services
from sessions_app.models import Project, Role
from sessions_app.selectors import access

ADMIN_USERNAME = "admin"


def served_url(host: str, port: int) -> str:
    """The address to open for a server listening on host:port (a wildcard host is reached on loopback)."""
    host = host.strip("[]")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Command(BaseCommand):
    help = (
        "Create the local admin user on the first start and print its login and an API token (for `make run`);"
        " later starts change nothing and say how to get another token."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="the address the server listens on (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8000, help="the port it listens on (default 8000)")
        parser.add_argument("--url", default="", help="the address to print, when not http://HOST:PORT (make run-scaleout: nginx's https)")
        parser.add_argument(
            "--manage-command",
            default=".venv/bin/python manage.py",
            help="how the messages spell manage.py (`turnlog serve` says `turnlog manage`)",
        )

    def handle(self, *args, host: str, port: int, url: str, manage_command: str, **options):
        url = url.rstrip("/") or served_url(host, port)
        # A headless first start names its own admin (migrate made it): no random one, no secret printed.
        init_admin = os.environ.get("TURNLOG_INIT_ADMIN_USERNAME", "").strip()
        created = None if init_admin else self.create_admin()
        if init_admin:
            lines = [
                f"  log in as:  {init_admin}, with the password in {os.environ.get('TURNLOG_INIT_ADMIN_PASSWORD_FILE', '')}"
                " (TURNLOG_INIT_ADMIN_PASSWORD_FILE)",
                f"  API tokens: yours are listed on {url}/account/",
            ]
        elif created is not None:
            password, token = created
            lines = [
                f"  log in as:  {ADMIN_USERNAME} / {password}",
                f"  API token:  {token}",
                f"  try:        curl -H 'Authorization: Bearer {token}' {url}/api/v1/sessions",
                "  Both are shown this once: Turnlog keeps only hashes. Change the password on your account page",
                f"  ({url}/account/password/).",
            ]
        else:
            # Nothing is reset: a changed password stays, and no new full-scope token piles up per start.
            project = Project.default()
            lines = [
                f"  log in as:  {ADMIN_USERNAME}, with your password (unchanged; forgot it? {manage_command} changepassword {ADMIN_USERNAME})",
                f"  API tokens: yours are listed on {url}/account/; a new one: {url}/projects/{project.slug}/tokens",
                f"              or {manage_command} tokens create --user {ADMIN_USERNAME} --project {project.slug}",
            ]
        self.stdout.write("\n".join(["", f"Turnlog is starting on {url}", *lines, ""]))

    @transaction.atomic
    def create_admin(self) -> tuple[str, str] | None:
        """On the first start (no user `admin` yet): the superuser admin of the default project
        and a token of it, returned with its password; None (changing nothing) afterwards."""
        users = get_user_model()
        if users.objects.filter(username=ADMIN_USERNAME).exists():
            return None
        password = secrets.token_urlsafe(12)
        user = users.objects.create_superuser(username=ADMIN_USERNAME, email="", password=password)
        project = Project.default()
        services.set_membership(project=project, user=user, role=Role.ADMIN)
        _, token = services.issue_token(user=user, project=project, scopes=access.role_scopes(Role.ADMIN), name="local admin")
        return password, token
