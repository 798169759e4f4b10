"""The end of a login, told to every process's check of its open streams, whatever path ended it.

A logout (the site's or the admin's) and a login's new key (a password change
keeps the changer logged in under a new one) delete the login session through
the session store (`SessionStore`, settings.SESSION_ENGINE); a password change,
a deactivation or a deletion saves (or deletes) the user. Each is told on
commit (publishing.publish_credentials_ended_on_commit), and the streams opened
with that login close at once instead of at the next periodic check. What
nothing here sees (a queryset update, a session's expiry) waits for that
periodic check; those streams send nothing meanwhile all the same
(dashboard.live.credentials checks before each frame).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.db.models.signals import post_delete, post_save

from .publishing import publish_credentials_ended_on_commit

# What a user's save must touch to end their logins or tokens.
CREDENTIAL_FIELDS = frozenset({"password", "is_active"})


class SessionStore(DatabaseSessionStore):
    """Django's database sessions (the same rows, keys and signing), each deletion of one told on commit.

    A store rather than a post_delete receiver: a receiver of the session model would make every
    queryset delete of sessions (clearsessions) load each row and tell each one.
    """

    def delete(self, session_key=None):
        if session_key is None and self.session_key is None:
            return
        super().delete(session_key)
        publish_credentials_ended_on_commit()

    async def adelete(self, session_key=None):
        if session_key is None and self.session_key is None:
            return
        await super().adelete(session_key)
        await sync_to_async(publish_credentials_ended_on_commit)()


def user_saved(sender, created: bool, update_fields=None, **kwargs) -> None:
    # A save of every field may have changed them (the admin's form; set_password and save); a login's last_login does not.
    if not created and (update_fields is None or CREDENTIAL_FIELDS & set(update_fields)):
        publish_credentials_ended_on_commit()


def user_deleted(sender, **kwargs) -> None:
    publish_credentials_ended_on_commit()


def connect_receivers() -> None:
    """Called once the apps are ready (sessions_app.apps), in every process: a command may deactivate a user too."""
    user_model = get_user_model()
    post_save.connect(user_saved, sender=user_model, dispatch_uid="turnlog-user-saved")
    post_delete.connect(user_deleted, sender=user_model, dispatch_uid="turnlog-user-deleted")
