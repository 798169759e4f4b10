"""Projects and their members from the command line; membership changes are audited with the actor "cli"."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count

from sessions_app import services
from sessions_app.log.events import format_time
from sessions_app.models import Membership, Project, Role


class Command(BaseCommand):
    help = "List and create projects; list, add and remove their members."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="every project, with its members and sessions counted")
        create = sub.add_parser("create", help="a new, empty project")
        create.add_argument("slug", help="its short name in URLs, the API and --project")
        create.add_argument("--name", default="", help="how people read it (default: the slug)")
        members = sub.add_parser("members", help="a project's members and their roles")
        members.add_argument("slug")
        add = sub.add_parser("add-member", help="make a user a member, or change their role")
        add.add_argument("slug")
        add.add_argument("username")
        add.add_argument("--role", required=True, choices=Role.values)
        remove = sub.add_parser("remove-member", help="take a user out of a project")
        remove.add_argument("slug")
        remove.add_argument("username")

    def handle(self, *args, action: str, **options):
        getattr(self, action.replace("-", "_"))(**options)

    def list(self, **_):
        projects = Project.objects.annotate(
            member_count=Count("memberships", distinct=True), session_count=Count("sessions", distinct=True)
        )
        self.stdout.write(f"{'PROJECT':<24} {'MEMBERS':>7} {'SESSIONS':>8}  NAME")
        for project in projects:
            self.stdout.write(f"{project.slug:<24} {project.member_count:>7} {project.session_count:>8}  {project.name}")

    def create(self, *, slug: str, name: str, **_):
        project = Project(slug=slug, name=name or slug)
        try:
            project.full_clean()
        except ValidationError as invalid:
            problems = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in invalid.message_dict.items())
            raise CommandError(f"Cannot create project {slug!r}: {problems}") from None
        project.save()
        self.stdout.write(self.style.SUCCESS(f"Created project {project.slug!r} ({project.name}); add members with add-member."))

    def members(self, *, slug: str, **_):
        project = self.project(slug)
        memberships = Membership.objects.filter(project=project).select_related("user").order_by("user__username")
        if not memberships:
            self.stdout.write(f"Project {slug!r} has no members.")
            return
        self.stdout.write(f"{'USER':<24} {'ROLE':<10} SINCE")
        for membership in memberships:
            self.stdout.write(f"{membership.user.get_username():<24} {membership.role:<10} {format_time(membership.created_at)}")

    def add_member(self, *, slug: str, username: str, role: str, **_):
        project, user = self.project(slug), self.user(username)
        before = Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
        self.set_membership(project, user, role)
        if before is None:
            self.stdout.write(self.style.SUCCESS(f"Added {username} to {slug} as {role}."))
        elif before != role:
            self.stdout.write(self.style.SUCCESS(f"Changed {username}'s role in {slug} from {before} to {role}."))
        else:
            self.stdout.write(f"{username} already is {role} of {slug}: nothing changed.")

    def remove_member(self, *, slug: str, username: str, **_):
        project, user = self.project(slug), self.user(username)
        if not Membership.objects.filter(project=project, user=user).exists():
            raise CommandError(f"{username} is not a member of project {slug!r}: nothing to remove.")
        self.set_membership(project, user, None)
        self.stdout.write(self.style.SUCCESS(f"Removed {username} from {slug}; their tokens for it no longer reach its sessions."))

    def set_membership(self, project: Project, user, role: str | None) -> None:
        try:
            services.set_membership(project=project, user=user, role=role, by=None)
        except services.LastAdmin as refused:
            raise CommandError(f"{refused}. Nothing changed.") from None

    def project(self, slug: str) -> Project:
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            known = ", ".join(Project.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"No project {slug!r} (projects: {known}).")
        return project

    def user(self, username: str):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}: make the account first (the admin, or create_token).")
        return user
