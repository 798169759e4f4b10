"""Session.carried_patch_seqs: the dangling-call patch results a session holds but did not write.

A patch writes metadata {} (the spec's data exactly), so only its RecoveryRecord tells its results
from a tool's; a fork copied the results without the record. Forks made before this migration
learn them here: a session with a parent carries its parent's patch seqs below its seed, where
its event is the very event the parent holds (an import naming a parent may hold other events).
Parents come first (a fork is created after its parent). Imports made before keep none: their
blobs did not say.
"""

from django.db import migrations, models


def carry_patch_seqs_into_forks(apps, schema_editor):
    Session = apps.get_model("sessions_app", "Session")
    Event = apps.get_model("sessions_app", "Event")
    RecoveryRecord = apps.get_model("sessions_app", "RecoveryRecord")
    patched: dict[str, set[int]] = {}
    for session_id, first, last in RecoveryRecord.objects.filter(kind="dangling_patch").values_list("session_id", "first_seq", "last_seq"):
        patched.setdefault(session_id, set()).update(range(first, last + 1))
    if not patched:
        return
    forks = Session.objects.filter(parent__isnull=False).order_by("created_at", "id")
    for session_id, parent_id, seed_length in forks.values_list("id", "parent_id", "seed_length").iterator():
        candidates = {seq for seq in patched.get(parent_id, ()) if seq < seed_length}
        if not candidates:
            continue
        theirs = dict(Event.objects.filter(session_id=parent_id, seq__in=candidates).values_list("seq", "data"))
        ours = Event.objects.filter(session_id=session_id, seq__in=candidates, type="tool_result").values_list("seq", "data")
        carried = sorted(seq for seq, data in ours if theirs.get(seq) == data)
        if carried:
            Session.objects.filter(pk=session_id).update(carried_patch_seqs=carried)
            patched.setdefault(session_id, set()).update(carried)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0009_notes"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="carried_patch_seqs",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(carry_patch_seqs_into_forks, migrations.RunPython.noop),
    ]
