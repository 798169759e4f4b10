import json
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from sessions_app import access, services
from sessions_app.models import ApiToken, Project, Role, hash_token

CREDENTIALS_FILE = Path(settings.BASE_DIR) / "var" / "local-admin.json"


def served_url(host: str, port: int) -> str:
    """The address to open for a server listening on host:port (a wildcard host is reached on loopback)."""
    host = host.strip("[]")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Command(BaseCommand):
    help = "Create the local admin user once and print its login and API token (for `make run`)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="the address the server listens on (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8000, help="the port it listens on (default 8000)")

    def handle(self, *args, host: str, port: int, **options):
        credentials = self.credentials()
        url = served_url(host, port)
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"Turnlog is starting on {url}",
                    f"  log in as:  {credentials['username']} / {credentials['password']}",
                    f"  API token:  {credentials['token']}",
                    f"  try:        curl -H 'Authorization: Bearer {credentials['token']}' {url}/api/v1/sessions",
                    "",
                ]
            )
        )

    def credentials(self) -> dict:
        """The stored local credentials, recreated if the database lost them."""
        if CREDENTIALS_FILE.exists():
            stored = json.loads(CREDENTIALS_FILE.read_text())
            user = get_user_model().objects.filter(username=stored["username"]).first()
            if user and user.check_password(stored["password"]) and ApiToken.objects.usable().filter(
                token_sha256=hash_token(stored["token"])
            ).exists():
                return stored
        username = "admin"
        password = secrets.token_urlsafe(12)
        user = get_user_model().objects.filter(username=username).first() or get_user_model()(username=username)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        project = Project.default()
        services.set_membership(project=project, user=user, role=Role.ADMIN)
        _, token = services.issue_token(user=user, project=project, scopes=access.role_scopes(Role.ADMIN), name="local admin")
        stored = {"username": username, "password": password, "token": token}
        CREDENTIALS_FILE.parent.mkdir(parents=True, exist_ok=True)
        CREDENTIALS_FILE.write_text(json.dumps(stored))
        CREDENTIALS_FILE.chmod(0o600)
        return stored
