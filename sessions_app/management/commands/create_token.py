from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from django.db import transaction

from sessions_app import services
from sessions_app.management.database_copies import Database
from sessions_app.models import Project, Role
from sessions_app.selectors import access

# Tool policies belong to no project (they rank every project's recovery previews), so editing
# them stays a site-wide model permission, which an operator made here gets.
TOOL_POLICY_PERMISSIONS = ["add_toolpolicy", "change_toolpolicy", "delete_toolpolicy", "view_toolpolicy"]


class Command(BaseCommand):
    help = (
        "Create a user if needed, make them a member of the default project (an operator with --staff),"
        " and print a new API token for it, alone on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--staff",
            action="store_true",
            help="make the user a staff operator: may log in to the admin (once given a password), recover sessions"
            " and edit tool policies",
        )

    @transaction.atomic
    def handle(self, *args, username: str, staff: bool, **options):
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
        if staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            user.user_permissions.add(
                *Permission.objects.filter(content_type__app_label="sessions_app", codename__in=TOOL_POLICY_PERMISSIONS)
            )
        project = Project.default()
        wanted = Role.OPERATOR if staff else Role.MEMBER
        at_least(user, wanted, project)
        scopes = access.role_scopes(wanted)
        _, secret = services.issue_token(user=user, project=project, scopes=scopes, name="create_token")
        if staff and not user.has_usable_password():
            self.stderr.write(f"To log in to the admin, give {username!r} a password: python manage.py changepassword {username}")
        self.stderr.write(
            f"{'Created' if created else 'Found'} user {username!r}{' (staff)' if staff else ''},"
            f" {wanted} of project {project.slug!r} in {Database.current()}; new token with scopes {', '.join(sorted(scopes))}:"
        )
        self.stdout.write(secret)


def at_least(user, role: str, project: Project) -> None:
    """Make `user` a `role` of `project` unless they hold more already (an admin stays an admin)."""
    held = access.Actor(user=user).roles().get(project.pk)
    if held is None or not access.ROLE_CAPABILITIES[role] <= access.ROLE_CAPABILITIES[held]:
        services.set_membership(project=project, user=user, role=role)
