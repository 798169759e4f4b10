"""The names stored for calls before OpenAI's chat shape was read (session-log.md section 1).

A call sent as `{"id", "type": "function", "function": {"name", "arguments"}}`
was sighted with no name: CallSighting.tool_name is recomputed from its event
as sessions_app.log.calls reads it now, and so is the `name` of each call
listed in the strategies a RecoveryRecord kept (found again by its id among
the calls its session sighted). The classes and strategies recorded stay as
they were decided. Events are never changed.
"""

from django.db import migrations

from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events

CHUNK = 2000


def _events_data(Event, session_id: str, seqs) -> dict[int, dict]:
    rows = Event.objects.filter(session_id=session_id, seq__in=list(seqs), type="assistant_message")
    return dict(rows.values_list("seq", "data"))


def recompute_call_names(apps, schema_editor):
    CallSighting = apps.get_model("sessions_app", "CallSighting")
    Event = apps.get_model("sessions_app", "Event")
    RecoveryRecord = apps.get_model("sessions_app", "RecoveryRecord")
    longest = CallSighting._meta.get_field("tool_name").max_length
    prep_call_id = CallSighting._meta.get_field("call_id").get_prep_value

    # Sightings, a chunk of (session, seq) at a time, in key order so each chunk is an index range.
    sightings = CallSighting.objects.order_by("session_id", "seq", "pk").values_list("pk", "session_id", "seq", "call_id", "tool_name")
    chunk: list[tuple] = []
    for row in sightings.iterator(chunk_size=CHUNK):
        chunk.append(row)
        if len(chunk) >= CHUNK:
            _fix_sightings(CallSighting, Event, chunk, longest, prep_call_id)
            chunk = []
    _fix_sightings(CallSighting, Event, chunk, longest, prep_call_id)

    for record in RecoveryRecord.objects.exclude(strategies=[]).iterator(chunk_size=CHUNK):
        if _fix_record(Event, record):
            record.save(update_fields=["strategies"])


def _fix_sightings(CallSighting, Event, rows: list[tuple], longest: int, prep_call_id) -> None:
    by_session: dict[str, set[int]] = {}
    for _, session_id, seq, _, _ in rows:
        by_session.setdefault(session_id, set()).add(seq)
    expected: dict[tuple[str, int], dict[str, str]] = {}
    for session_id, seqs in by_session.items():
        for seq, data in _events_data(Event, session_id, seqs).items():
            if isinstance(data, dict):
                names = log_calls.sighting_names(data)
                expected[session_id, seq] = {prep_call_id(cid): name[:longest] for cid, name in names.items()}
    for pk, session_id, seq, stored_id, stored_name in rows:
        name = expected.get((session_id, seq), {}).get(stored_id)
        if name is not None and name != stored_name:
            CallSighting.objects.filter(pk=pk).update(tool_name=name)


def _fix_record(Event, record) -> bool:
    """Fill in the name of each recorded call read as having none; True when one changed."""
    nameless = [
        call for turn in record.strategies if isinstance(turn, dict) and isinstance(turn.get("calls"), list)
        for call in turn["calls"] if isinstance(call, dict) and call.get("name") is None and isinstance(call.get("id"), str)
    ]  # fmt: skip
    if not nameless:
        return False
    names = {}
    for call in nameless:
        seq = call.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            continue
        event = Event.objects.filter(session_id=record.session_id, seq=seq).values_list("type", "data").first()
        if event is None or not isinstance(event[1], dict):
            continue
        type_, data = event
        sighted = data if type_ == "tool_call" else next(
            (c for c in log_events.tool_calls_of(data) if log_events.call_id(c) == call["id"]), None
        )
        if type_ in ("tool_call", "assistant_message") and log_events.call_id(sighted) == call["id"]:
            if (name := log_calls.call_name(sighted)) is not None:
                names[id(call)] = name
    for call in nameless:
        if id(call) in names:
            call["name"] = names[id(call)]
    return bool(names)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0006_event_received_at"),
    ]

    operations = [
        migrations.RunPython(recompute_call_names, migrations.RunPython.noop),
    ]
