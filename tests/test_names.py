"""Tests of the rules for key names, owners, scope names and descriptions."""

from __future__ import annotations

import pytest

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import (
    check_description,
    check_key_name,
    check_owner,
    check_scope_name,
    key_name_problem,
    parse_scopes,
    shorten,
)


@pytest.mark.parametrize("name", ["demo", "ci-deploy_2", "a", "v1.2", "A" * 64])
def test_good_key_names_pass(name: str) -> None:
    """Letters, digits, '.', '_' and '-' up to 64 characters are accepted."""
    assert check_key_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", " demo", "-lead", "with space", "[bold red]x\x1b[2J", "a" * 65, "tab\there", "é", "a/b"],
)
def test_bad_key_names_are_refused_with_a_reason(name: str) -> None:
    """Empty, too long, markup, escape sequences, spaces and non-ASCII names are refused."""
    with pytest.raises(InvalidInputError) as info:
        check_key_name(name)
    assert "\x1b" not in str(info.value)  # the message shows escapes, never runs them
    assert key_name_problem(name) == str(info.value)


def test_owner_allows_service_account_style() -> None:
    """Owners may look like login names or e-mail style service accounts, never markup."""
    assert check_owner("svc.ci@example") == "svc.ci@example"
    with pytest.raises(InvalidInputError):
        check_owner("[red]root")


def test_scope_names_are_lower_case_api_names() -> None:
    """Scope names are lower-case, may hold ':' and must start with a letter."""
    assert check_scope_name("serving:admin") == "serving:admin"
    for bad in ("Serving", "1x", "a b", ""):
        with pytest.raises(InvalidInputError):
            check_scope_name(bad)


def test_descriptions_refuse_control_and_bidi_characters() -> None:
    """Descriptions may be any printable text but no control or bidi-override character."""
    assert check_description("Model serving [API]") == "Model serving [API]"
    for bad in ("a\x1b[2Jb", "line\nbreak", "evil\u202etxt", "x" * 201):
        with pytest.raises(InvalidInputError):
            check_description(bad)


def test_parse_scopes_splits_sorts_and_deduplicates() -> None:
    """Repeated and comma-separated scope options become one sorted tuple without repeats."""
    assert parse_scopes(["serving,project", "project", " serving "]) == ("project", "serving")
    assert parse_scopes([]) == ()


def test_shorten_keeps_both_ends_of_a_long_name() -> None:
    """A name cut to a width keeps its start and its end around '…'; a short one is untouched."""
    one, two = "production-inference-gateway-eu-west-1", "production-inference-gateway-eu-west-2"
    cut = shorten(one, 25)
    assert len(cut) == 25 and cut.startswith("production-") and cut.endswith("…ay-eu-west-1")
    assert shorten(one, 25) != shorten(two, 25)
    assert shorten("ci", 25) == "ci" and shorten(one, 1) == "…" and shorten(one, 0) == ""


def test_counts_are_written_one_way_without_a_parenthesised_plural() -> None:
    """counted says '1 key', '0 keys', '1,200 keys' and takes other nouns ('2 scopes')."""
    from apikey_tui.names import counted

    assert [counted(1), counted(0), counted(1200), counted(2, "scope")] == [
        "1 key",
        "0 keys",
        "1,200 keys",
        "2 scopes",
    ]
