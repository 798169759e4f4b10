from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from django.db import transaction

from sessions_app.models import ApiToken


# An operator recovers sessions and keeps the tool policies that recovery previews rank calls by;
# every staff user may read the logs in the admin without a model permission.
OPERATOR_PERMISSIONS = ["recover_session", "add_toolpolicy", "change_toolpolicy", "delete_toolpolicy", "view_toolpolicy"]


class Command(BaseCommand):
    help = "Create a user if needed and print a new API token for it, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--staff", action="store_true", help="make the user a staff operator: may log in to the admin (once given a password), recover sessions and edit tool policies"
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
            user.user_permissions.add(*Permission.objects.filter(content_type__app_label="sessions_app", codename__in=OPERATOR_PERMISSIONS))
        _, secret = ApiToken.issue(user)
        if staff and not user.has_usable_password():
            self.stderr.write(f"To log in to the admin, give {username!r} a password: python manage.py changepassword {username}")
        self.stderr.write(f"{'Created' if created else 'Found'} user {username!r}{' (staff)' if staff else ''}; new token:")
        self.stdout.write(secret)
