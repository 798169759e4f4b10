"""Retention: how long a project keeps its sessions (None: forever), and the audit actions of deleting a
session and of changing that setting (sessions_app/retention)."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0014_search_after_commit'),
    ]

    operations = [
        migrations.AddField(
            model_name='project',
            name='retention_days',
            field=models.PositiveIntegerField(blank=True, help_text='Delete sessions quiet for longer than this many days (empty: keep them forever)', null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(36500)]),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='action',
            field=models.CharField(choices=[('recovery', 'Recovery applied'), ('dangling_patch', 'Dangling calls patched'), ('fork', 'Session forked'), ('token_created', 'Token created'), ('token_revoked', 'Token revoked'), ('member_added', 'Member added'), ('member_changed', "Member's role changed"), ('member_removed', 'Member removed'), ('access_denied', 'Access denied'), ('auto_recovery_held', 'Auto-recovery held'), ('note_added', 'Note added'), ('note_edited', 'Note edited'), ('note_deleted', 'Note deleted'), ('session_deleted', 'Session deleted'), ('retention_changed', 'Retention changed')], max_length=20),
        ),
    ]
