import pytest

from sessions_app.lib.bearer import bearer_secret


@pytest.mark.parametrize(
    "header, secret",
    [
        ("Bearer tl_abc", "tl_abc"),
        ("bearer tl_abc", "tl_abc"),
        ("BEARER tl_abc", "tl_abc"),
        ("Bearer  tl_abc ", "tl_abc"),
        ("  Bearer tl_abc", "tl_abc"),
        ("Bearer", None),
        ("Bearer    ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearertl_abc", None),
        ("", None),
        (None, None),
    ],
)
def test_the_token_is_what_follows_the_bearer_scheme_without_blanks(header, secret):
    assert bearer_secret(header) == secret
