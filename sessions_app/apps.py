from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Whatever path ends a login (the site, the admin, a command), open streams hear of it at once.
        from sessions_app.services import logins

        logins.connect_receivers()
