import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_the_models_have_no_change_without_a_migration():
    # Exits with status 1 (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
