"""User names to folders (conductor/storage/paths.py, beside valid_user: the CLI and the
server file users by the one rule; server/access/user_names.py reads a header's name):
a pure unit test of our own rule,
without an engine. The rule's end to end test is in test_session_identity.py."""

from __future__ import annotations

import pytest

from conductor.storage.paths import UserNameError, user_folder, valid_user
from server.access import user_names
from server.access.user_names import header_text


def test_a_name_the_store_takes_keeps_its_folder_lower_cased():
    for name in ("alice", "Alice", "bob.smith@example.com", "user01", "a+b", "x" * 64):
        assert user_folder(name) == name.lower()


def test_other_names_get_a_readable_folder_of_their_own():
    names = ["josé", "José", "jose\u0301", "o'brien", "O'Brien", "山田", "山田太郎", "a b",
             "a_b!", "x" * 65, "jose", "'bob", "_x y-"]
    folders = {n: user_folder(n) for n in names}
    assert all(valid_user(f) for f in folders.values()), folders
    assert folders["josé"].startswith("jose--") and folders["o'brien"].startswith("o-brien--")
    assert folders["山田"].startswith("user--")
    # one name whatever its case or accents' encoding; different names never share one
    assert folders["josé"] == folders["José"] == folders["jose\u0301"]
    assert folders["o'brien"] == folders["O'Brien"]
    distinct = {folders[n] for n in ("josé", "o'brien", "山田", "山田太郎", "a b", "a_b!",
                                     "x" * 65, "jose")}
    assert len(distinct) == 8
    assert folders["jose"] == "jose"


def test_a_plain_name_shaped_like_a_mapped_folder_is_mapped_too():
    taken = user_folder("josé")
    assert valid_user(taken)
    assert user_folder(taken) != taken  # nobody can name themselves into josé's folder


@pytest.mark.parametrize("name", ["", " ", "\t", "a\x00b", "a\x1bb", "a\x7fb", "x" * 129])
def test_names_that_can_be_no_ones_are_refused_with_a_reason(name):
    with pytest.raises(UserNameError, match="user name"):
        user_folder(name)


def test_a_header_sent_as_utf8_reads_as_its_sender_wrote_it():
    assert header_text("josé".encode().decode("latin-1")) == "josé"
    assert header_text("jos\xe9") == "josé"  # Latin-1 bytes that are no UTF-8: as they are
    assert header_text("alice") == "alice"


def test_the_server_files_users_by_the_storage_rule_itself():
    assert user_names.user_folder is user_folder  # one rule, not a copy that drifts
    assert user_names.UserNameError is UserNameError
