"""The settings registry is the one list: the docs' settings reference is
generated from it (a setting without a doc fails the docs build), and every
default written in the code agrees with it."""

from __future__ import annotations

import ast
import re
import sys

import pytest
from scrapy.settings import Settings

from crawler.settings_registry import BY_NAME, SETTINGS, Setting, markdown_table, setting
from tests.servers import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import reference  # noqa: E402  (docs/_ext/reference.py: the Sphinx extension that writes the reference)

# settings.getint("CRAWLER_X", 5), _number(settings, "CRAWLER_X", 5), ...
_READ = re.compile(r'(?:(?<!environ\.)get(?:int|float|bool|list|dict)?\(|_number\(\w+, )"((?:CRAWLER|SCHEDULER)_[A-Z_]+)", ([^()]+?)\)')


def test_the_docs_settings_reference_is_the_registry() -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert "<!-- reference: settings -->" in page and "<!-- reference: settings-table -->" in page
    text, problems = reference.generate("settings")
    assert problems == []
    entries = text.split("```{setting} ")[1:]
    assert [e.split("\n", 1)[0] for e in entries] == [s.name for s in SETTINGS]  # every setting, in order
    for entry, s in zip(entries, SETTINGS):
        assert f"- default: {s.shown or '`' + reference._literal_of(s.default) + '`'}\n" in entry, s.name
        assert f"- value: {s.expects()}\n" in entry and s.doc in entry, s.name
    assert "- default: `0.0` (`70` in billion)\n- value: a finite number >= 0\n" in text  # CRAWLER_DOMAIN_DELAY


@pytest.mark.parametrize("doc", ["", "   "])
def test_a_setting_without_doc_is_a_docs_build_warning(doc: str) -> None:
    """`make test` builds the docs with warnings as errors: this warning fails it."""
    undocumented = Setting(name="CRAWLER_NEW", doc=doc, default=1, form="int")
    _, problems = reference.settings_markdown([*SETTINGS[:2], undocumented])
    assert problems == ["setting CRAWLER_NEW has no doc in crawler/settings_registry.toml"]


def test_docs_pages_tables_are_the_registry() -> None:
    pages = {s.page for s in BY_NAME.values() if s.page}
    assert pages, "no setting documented on a page of its own"
    for page in pages:
        text = (ROOT / page).read_text()
        table = text.split("## Settings\n\n", 1)[1].split("\n\n", 1)[0] + "\n"
        assert table == markdown_table(page), f"run: python -m crawler.settings_registry {page}, and paste it there"


def test_defaults_are_written_only_in_the_registry() -> None:
    read = 0
    for path in (ROOT / "crawler").rglob("*.py"):
        text = path.read_text()
        for name, literal in _READ.findall(text):
            try:
                value = ast.literal_eval(literal)
            except (ValueError, SyntaxError):
                continue  # computed from other settings: documented by its ``shown`` text
            raise AssertionError(f"{path.name}: {name} has its default {value!r} written there; "
                                 f"read it with crawler.settings_registry.setting")
        for name in re.findall(r'setting\([\w.]+, "([A-Z_]+)"\)', text):
            assert name in BY_NAME, f"{path.name}: {name} is not in crawler/settings_registry.toml"
            read += 1
    assert read > 40  # the pattern still finds the reads


def test_a_setting_is_read_through_its_form() -> None:
    settings = Settings({"CRAWLER_MAX_ATTEMPTS": "7", "CRAWLER_HTML_ONLY": "False",
                         "CRAWLER_LOCK_DOMAINS": "a.test,b.test"})
    assert setting(settings, "CRAWLER_MAX_ATTEMPTS") == 7
    assert setting(settings, "CRAWLER_HTML_ONLY") is False
    assert setting(settings, "CRAWLER_LOCK_DOMAINS") == ["a.test", "b.test"]
    assert setting(settings, "CRAWLER_BACKOFF_MAX") == BY_NAME["CRAWLER_BACKOFF_MAX"].default  # unset
    with pytest.raises(KeyError):
        setting(settings, "CRAWLER_NO_SUCH_SETTING")


def test_every_setting_read_is_registered() -> None:
    names = set()
    for path in (ROOT / "crawler").rglob("*.py"):
        names |= set(re.findall(r'"(CRAWLER_[A-Z_]+)"', path.read_text()))
    assert names - set(BY_NAME) == set()


CALLS: list[object] = []


def count_rule(settings: object) -> None:
    CALLS.append(settings)


def test_final_settings_are_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler import settings_registry

    monkeypatch.setattr(settings_registry, "RULES", ("tests.test_settings_registry:count_rule",))
    CALLS.clear()
    draft = Settings({"CRAWLER_MAX_ATTEMPTS": 3})
    settings_registry.validate(draft)
    settings_registry.validate(draft)  # not final yet: an addon may still change it
    assert len(CALLS) == 2
    final = draft.frozencopy()
    for _ in range(3):  # the command, the addon, ...
        settings_registry.validate(final)
    assert len(CALLS) == 3


def test_an_unknown_crawler_name_is_said_once_with_the_name_meant(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from crawler import settings_registry

    monkeypatch.setattr(settings_registry, "_warned", set())
    draft = Settings({"CRAWLER_DOMIAN_DELAY": 5, "CRAWLER_DOMAIN_DELAY": 1, "DOWNLOAD_DELAY": 1, "MY_OWN": 1})
    with caplog.at_level("WARNING", logger="crawler.settings_registry"):
        settings_registry.validate(draft)
        settings_registry.validate(draft.frozencopy())  # the addon, after the command
        settings_registry.validate(Settings({"CRAWLER_DOMIAN_DELAY": 5}), unknown=False)
    assert [r.getMessage() for r in caplog.records] == [
        "unknown setting CRAWLER_DOMIAN_DELAY (did you mean CRAWLER_DOMAIN_DELAY?)"]
    assert settings_registry.unknown_names(Settings({"CRAWLER_QQQQQQ": 1})) == [("CRAWLER_QQQQQQ", None)]
