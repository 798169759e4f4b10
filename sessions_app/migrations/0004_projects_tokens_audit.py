"""Projects, roles, scoped tokens and the audit log.

Existing data moves into a "default" project whose members are today's users,
with the rights they had: superusers are its admins; staff and holders of the
old recover_session permission its operators; everyone else a member. Their
tokens keep working in it with the scopes of that role.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


ROLE_SCOPES = {
    "admin": ["append", "fork", "read", "recover"],
    "operator": ["append", "fork", "read", "recover"],
    "member": ["append", "fork", "read"],
}


def into_default_project(apps, schema_editor):
    Project = apps.get_model("sessions_app", "Project")
    Membership = apps.get_model("sessions_app", "Membership")
    Session = apps.get_model("sessions_app", "Session")
    ApiToken = apps.get_model("sessions_app", "ApiToken")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    project, _ = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})
    Session.objects.filter(project__isnull=True).update(project=project)
    recoverers = set(
        User.objects.filter(user_permissions__codename="recover_session").values_list("pk", flat=True)
    ) | set(User.objects.filter(groups__permissions__codename="recover_session").values_list("pk", flat=True))
    roles = {}
    for user in User.objects.all():
        role = "admin" if user.is_superuser else "operator" if user.is_staff or user.pk in recoverers else "member"
        roles[user.pk] = role
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": role})
    for token in ApiToken.objects.filter(project__isnull=True):
        token.project = project
        token.scopes = ROLE_SCOPES[roles.get(token.user_id, "member")]
        token.save(update_fields=["project", "scopes"])


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0003_event_wide_replace_bounds_and_long_call_ids'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Project',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('slug', models.SlugField(help_text='Short name used in URLs and the CLI (--project)', max_length=64, unique=True)),
                ('name', models.CharField(max_length=200)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['slug'],
            },
        ),
        migrations.AlterModelOptions(
            name='apitoken',
            options={'ordering': ['-created_at', '-id']},
        ),
        migrations.AlterModelOptions(
            name='session',
            options={'ordering': ['-last_activity_at', '-id']},
        ),
        migrations.AddField(
            model_name='apitoken',
            name='created_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='last_used_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='name',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='revoked_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='scopes',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.CreateModel(
            name='Membership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(choices=[('viewer', 'Viewer: reads sessions'), ('member', 'Member: also creates sessions, appends and forks'), ('operator', 'Operator: also recovers and patches'), ('admin', 'Admin: also manages members and tokens, reads the audit log')], default='member', max_length=10)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='sessions_app.project')),
            ],
            options={
                'ordering': ['project', 'user'],
            },
        ),
        migrations.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor_name', models.CharField(max_length=150)),
                ('action', models.CharField(choices=[('recovery', 'Recovery applied'), ('dangling_patch', 'Dangling calls patched'), ('fork', 'Session forked'), ('token_created', 'Token created'), ('token_revoked', 'Token revoked'), ('member_added', 'Member added'), ('member_changed', "Member's role changed"), ('member_removed', 'Member removed'), ('access_denied', 'Access denied')], max_length=20)),
                ('target', models.CharField(blank=True, default='', max_length=200)),
                ('detail', models.JSONField(blank=True, default=dict)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='audit_entries', to='sessions_app.project')),
            ],
            options={
                'verbose_name_plural': 'audit entries',
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.AddField(
            model_name='apitoken',
            name='project',
            field=models.ForeignKey(blank=True, help_text='None: a site-level token, which may only carry the metrics scope', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='tokens', to='sessions_app.project'),
        ),
        migrations.AddField(
            model_name='session',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='sessions', to='sessions_app.project'),
        ),
        migrations.RunPython(into_default_project, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='session',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='sessions', to='sessions_app.project'),
        ),
        migrations.AddIndex(
            model_name='session',
            index=models.Index(fields=['project', '-last_activity_at', '-id'], name='session_project_activity_idx'),
        ),
        migrations.AddConstraint(
            model_name='membership',
            constraint=models.UniqueConstraint(fields=('project', 'user'), name='membership_project_user_unique'),
        ),
        migrations.AddIndex(
            model_name='auditentry',
            index=models.Index(fields=['project', '-created_at', '-id'], name='audit_project_time_idx'),
        ),
    ]
