from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import views
from sessions_app.api import api

urlpatterns = [
    path("", views.session_list, name="session_list"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
