from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from sessions_app import access, services
from sessions_app.models import Project, Role


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
            help="make the user a staff operator: may log in to the admin (once given a password) and recover sessions",
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
        project = Project.default()
        wanted = Role.OPERATOR if staff else Role.MEMBER
        held = access.Actor(user=user).roles().get(project.pk)
        # Never lowers a role someone already has (an admin stays an admin).
        if held is None or access.ROLE_CAPABILITIES[held] < access.ROLE_CAPABILITIES[wanted]:
            services.set_membership(project=project, user=user, role=wanted)
        scopes = access.role_scopes(wanted)
        _, secret = services.issue_token(user=user, project=project, scopes=scopes, name="create_token")
        if staff and not user.has_usable_password():
            self.stderr.write(f"To log in to the admin, give {username!r} a password: python manage.py changepassword {username}")
        self.stderr.write(
            f"{'Created' if created else 'Found'} user {username!r}{' (staff)' if staff else ''},"
            f" {wanted} of project {project.slug!r}; new token with scopes {', '.join(sorted(scopes))}:"
        )
        self.stdout.write(secret)
