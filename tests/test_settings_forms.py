"""Every setting of the registry has a form, and every bad value of it is one
``SettingsError`` line naming the setting: in-process through ``validate()``,
and from ``scrapy crawl`` as exit status 2 with that one line on stderr.
The exit status also tells the truth about a crawl that ran and failed."""

from __future__ import annotations

import json
import math
import re
import subprocess
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.settings_registry import (
    BY_NAME,
    FORMS,
    SETTINGS,
    Setting,
    SettingsError,
    setting,
    unknown_names,
    validate,
)
from tests.servers import ROOT, run_scrapy, scrapy_env, wait_until

NAN, INF = float("nan"), float("inf")
UNWRITABLE = "/proc/crawler-settings-test/sub"  # /proc takes no new files, even from root

#: bad contents of settings whose form alone does not say it all
CONTENT = {
    "CRAWLER_KEY_PREFIX": ["", "a b", "a{b}"],
    "CRAWLER_DOMAIN_OVERRIDES": [{"a.test": {"speed": 1}}, {"a.test": {"rate": NAN}}, {"a.test": {"burst": 0}},
                                 {"a.test": 5}, '{"a.test": {"delay": -1}}'],
    "CRAWLER_SHARD_REDIS_URLS": [{"x": "redis://h/0"}, {"0": "http://h/"}, '{"-1": "redis://h/0"}', {"1": 5}],
    "CRAWLER_HOST_MAP": [{"*.test": "not an address"}, {"*.test": []}, {"*.test": [1]}, '{"a.test": "1.2.3"}'],
    "CRAWLER_ALLOW_PRIVATE": ["10.0.0.0/99", '["ok.test", "10.0.0.0/99"]', "5", "10.0.0", "ok.test,5", "a b.test",
                              "ops@ok.test"],
    "CRAWLER_METRICS_ADDRESS": ["not-an-address", "", "1.2.3.4.5", "127.0.0.1:9410", "http://127.0.0.1/"],
    "CRAWLER_TLS_GROUPS": ["nonsense"],
    "CRAWLER_TLS13_CIPHERSUITES": ["AES"],
    "CRAWLER_STATS_FILE": [f"{UNWRITABLE}/stats.json"],
    "REDIS_URL": ["http://h/0", "http://:secret@h/0", "nope"],
}

#: a good value of each setting without a default
GOOD = {
    "REDIS_URL": "redis://127.0.0.1:6379/0", "REDIS_HOST": "127.0.0.1", "REDIS_PORT": "6379", "REDIS_DB": "1",
    "CRAWLER_LEASE_SECONDS": "400", "CRAWLER_PREFETCH": "8", "CRAWLER_EXCLUDE_FILE": __file__,
    "CRAWLER_TLS_CA_FILE": __file__, "CRAWLER_STATS_FILE": "{tmp}/stats.json", "CRAWLER_WARC_DIR": "{tmp}/warc/new",
    "CRAWLER_STATE_DIR": "{tmp}",
}


def bad_values(entry: Setting, tmp: Path) -> list[Any]:
    """Values of the wrong form, out of range, or of bad content, for ``entry``."""
    form = entry.form
    values: list[Any]
    if form == "bool":
        values = ["maybe", "2", 2, [1], NAN, "yes please"]
    elif form in ("int", "float"):
        values = ["x", "nan", "inf", "-inf", NAN, INF, -INF, [1], True, {"a": 1}]
        if form == "int":
            values += ["1.5", 1.5, "1e3x"]
        if entry.minimum is not None:
            values.append(entry.minimum if entry.exclusive_minimum else entry.minimum - 1)
            values.append(str(entry.minimum - 1))
        if entry.maximum is not None:
            values.append(entry.maximum if entry.exclusive_maximum else entry.maximum + 1)
    elif form == "enum":
        values = ["nope", 7.5, ["auto"]]
    elif form == "str":
        values = [5, ["a"], {"a": 1}]
    elif form == "list":
        values = ['["a", ', '["a", 1]', "[1]", '{"a": 1}', {"a": 1}, 5, [None]]
    elif form == "dict":
        values = ["x", "[1]", '{"a": ', [1], 5, "1"]
    elif form == "file":
        values = [str(tmp / "no-such-file"), str(tmp), 5]
    elif form == "dir":
        (tmp / "a-file").write_text("")
        values = [str(tmp / "a-file"), str(tmp / "a-file" / "sub"), UNWRITABLE, 5]
    elif form == "url":
        values = [5]
    else:
        raise AssertionError(f"{entry.name}: no bad values for form {form!r}")
    return values + CONTENT.get(entry.name, [])


def good_value(entry: Setting, tmp: Path) -> Any:
    value = GOOD.get(entry.name, entry.default)
    return value.format(tmp=tmp) if isinstance(value, str) else value


def test_every_setting_has_a_form() -> None:
    declared = tomllib.loads((ROOT / "crawler" / "settings_registry.toml").read_text())["setting"]
    assert [e["name"] for e in declared if "form" not in e] == []
    assert [s.name for s in SETTINGS if s.form not in FORMS] == []
    for s in SETTINGS:
        if s.form == "enum":
            assert s.choices and (s.default is None or s.default in s.choices), s.name
        if s.default is not None and s.form in ("int", "float"):
            validate(Settings({s.name: s.default}))


@pytest.mark.parametrize("entry", SETTINGS, ids=lambda s: s.name)
def test_every_bad_value_is_one_line_naming_the_setting(entry: Setting, tmp_path: Path) -> None:
    validate(Settings({entry.name: good_value(entry, tmp_path)}))  # a good value passes
    tried = bad_values(entry, tmp_path)
    assert tried
    for bad in tried:
        with pytest.raises(SettingsError) as caught:
            validate(Settings({entry.name: bad}))
        message = str(caught.value)
        assert message.startswith(entry.name), (bad, message)
        assert "\n" not in message and "Traceback" not in message, message
        assert "secret" not in message


def test_the_count_of_bad_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tried = one_line = 0
    for entry in SETTINGS:
        for bad in bad_values(entry, tmp_path):
            tried += 1
            try:
                validate(Settings({entry.name: bad}))
            except SettingsError as exc:
                one_line += str(exc).startswith(entry.name) and "\n" not in str(exc)
    with capsys.disabled():
        print(f"\nsettings: {len(SETTINGS)}, bad values tried: {tried}, one-line errors: {one_line}")
    assert one_line == tried


@pytest.mark.parametrize(("values", "message"), [
    ({"CRAWLER_LEASE_SECONDS": 100, "DOWNLOAD_TIMEOUT": 100},
     r"CRAWLER_LEASE_SECONDS \(100\) must exceed DOWNLOAD_TIMEOUT \(100\)"),
    ({"CRAWLER_LOCK_TTL": "10", "DOWNLOAD_TIMEOUT": "30"}, r"CRAWLER_LOCK_TTL \(10\) must exceed DOWNLOAD_TIMEOUT"),
    ({"DOWNLOAD_TIMEOUT": "nan"}, "DOWNLOAD_TIMEOUT must be a finite number > 0, got 'nan'"),
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.3", "DOWNLOAD_TLS_MAX_VERSION": "TLSv1.2",
      "DOWNLOAD_HANDLERS": {"https": "crawler.fetch.DownloadHandler"}},
     r"DOWNLOAD_TLS_MIN_VERSION \(TLSv1.3\) is above DOWNLOAD_TLS_MAX_VERSION \(TLSv1.2\)"),
    ({"REQUEST_FINGERPRINTER_CLASS": "crawler.scheduler.fingerprint.Fingerprinter"},
     "REQUEST_FINGERPRINTER_CLASS: crawler.scheduler.fingerprint.Fingerprinter moved, "
     "use crawler.scheduler.Fingerprinter"),
    ({"DOWNLOADER_MIDDLEWARES": {"crawler.scheduler.acks.FrontierAckDownloaderMiddleware": 1}},
     "DOWNLOADER_MIDDLEWARES: crawler.scheduler.acks.FrontierAckDownloaderMiddleware moved, "
     "use crawler.middlewares.acks.FrontierAckDownloaderMiddleware"),
])
def test_cross_field_rules(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=f"^{message}"):
        validate(Settings(values))


def test_values_are_typed_and_json_lists_are_lists() -> None:
    settings = Settings({"CRAWLER_ALLOW_PRIVATE": '["*.test", "10.0.0.0/8"]', "CRAWLER_LOCK_DOMAINS": "a.test, b.test",
                         "CRAWLER_HOST_MAP": '{"*.test": ["127.0.0.1", "::1"]}', "CRAWLER_DOMAIN_DELAY": "1.5",
                         "CRAWLER_MAX_DEPTH": 3.0, "SCHEDULER_PERSIST": "True", "CRAWLER_DELAY_FROM": "Finish",
                         "CRAWLER_WARC_THREAD": False})
    validate(settings)
    assert setting(settings, "CRAWLER_ALLOW_PRIVATE") == ["*.test", "10.0.0.0/8"]
    assert setting(settings, "CRAWLER_LOCK_DOMAINS") == ["a.test", "b.test"]
    assert setting(settings, "CRAWLER_HOST_MAP") == {"*.test": ["127.0.0.1", "::1"]}
    assert setting(settings, "CRAWLER_DOMAIN_DELAY") == 1.5
    assert setting(settings, "CRAWLER_MAX_DEPTH") == 3 and isinstance(setting(settings, "CRAWLER_MAX_DEPTH"), int)
    assert setting(settings, "SCHEDULER_PERSIST") is True
    assert setting(settings, "CRAWLER_DELAY_FROM") == "finish"
    assert setting(settings, "CRAWLER_WARC_THREAD") == "false"
    assert setting(settings, "CRAWLER_LEASE_SECONDS") is None  # unset: computed by its reader
    assert math.isfinite(setting(Settings(), "CRAWLER_DOMAIN_DELAY"))


@pytest.mark.parametrize(("name", "value"), [
    ("CRAWLER_ALLOW_PRIVATE", '["*.test", "ok.test.", "10.0.0.*", "[ab].test", "host-1.example", "*", "::1"]'),
    ("CRAWLER_ALLOW_PRIVATE", "10.0.0.0/8, fd00::/8, 192.168.1.5"),
    ("CRAWLER_METRICS_ADDRESS", "0.0.0.0"), ("CRAWLER_METRICS_ADDRESS", "::"),
    ("CRAWLER_METRICS_ADDRESS", "::1"), ("CRAWLER_METRICS_ADDRESS", "localhost"),
])
def test_good_contents_pass(name: str, value: str) -> None:
    validate(Settings({name: value}))


def test_a_creatable_folder_is_not_created_by_the_check(tmp_path: Path) -> None:
    validate(Settings({"CRAWLER_WARC_DIR": str(tmp_path / "a" / "b")}))
    assert list(tmp_path.iterdir()) == []  # the write test left nothing behind


# --- scrapy crawl ------------------------------------------------------------


def crawl(redis_url: str, tmp_path: Path, *settings: str, env: dict[str, str] | None = None,
          spider: str = "billion", args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    cmd = ["crawl", spider, *args]
    if spider == "billion":
        seeds = tmp_path / "seeds.txt"
        if not seeds.exists():
            seeds.write_text("http://d0.test/\n")
        cmd += ["-a", f"seeds={seeds}"]
    for s in ("CRAWLER_PROGRESS_INTERVAL=0", *settings):
        cmd += ["-s", s]
    return run_scrapy(cmd, env or scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))


@pytest.mark.parametrize(("value", "message"), [
    ("CRAWLER_DOMAIN_DELAY=nan", "CRAWLER_DOMAIN_DELAY must be a finite number >= 0, got 'nan'"),
    ("CRAWLER_POLL_INTERVAL=inf", "CRAWLER_POLL_INTERVAL must be a finite number >= 0, got 'inf'"),
    ("CRAWLER_LOCK_ENABLED=maybe", "CRAWLER_LOCK_ENABLED must be True or False, got 'maybe'"),
    ("SCHEDULER_PERSIST=2", "SCHEDULER_PERSIST must be True or False, got '2'"),
    ("CRAWLER_WARC_THREAD=sometimes", "CRAWLER_WARC_THREAD must be one of auto, true, false, 1, 0, got 'sometimes'"),
    ("CRAWLER_HOST_MAP=[1]", "CRAWLER_HOST_MAP must be a dict (a JSON object on the command line), got [1]"),
    ("REDIS_PARAMS=x", "REDIS_PARAMS must be a JSON object"),
    ("CRAWLER_ROBOTS_TTL=nan", "CRAWLER_ROBOTS_TTL must be a finite number >= 1, got 'nan'"),
    ("CRAWLER_EXCLUDE_FILE=/no/such/exclusions.txt",
     "CRAWLER_EXCLUDE_FILE must be a readable file that exists, got '/no/such/exclusions.txt'"),
    ("CRAWLER_TLS_CA_FILE=/no/such/ca.pem", "CRAWLER_TLS_CA_FILE must be a readable file that exists"),
    ("CRAWLER_WARC_DIR=" + UNWRITABLE, "CRAWLER_WARC_DIR must be a writable folder"),
    ("CRAWLER_ALLOW_PRIVATE=5", "CRAWLER_ALLOW_PRIVATE: '5' is neither a network (CIDR) nor a host pattern"),
    ("CRAWLER_METRICS_ADDRESS=not-an-address",
     "CRAWLER_METRICS_ADDRESS must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::) or localhost, "
     "got 'not-an-address'"),
    # given on the command line, an empty contact is empty: the environment's (ops@example.org) is not taken instead
    ("CRAWLER_CONTACT=", "the billion spider crawls the open web: set CRAWLER_CONTACT"),
])
def test_scrapy_crawl_bad_setting_is_exit_2_and_one_line(redis_url: str, tmp_path: Path, value: str,
                                                        message: str) -> None:
    result = crawl(redis_url, tmp_path, value)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"crawler: error: {message}"), lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["frontier", "dlq"])
def test_the_other_commands_say_a_bad_setting_in_one_line(redis_url: str, command: str) -> None:
    result = run_scrapy([command, "demo", "-s", "CRAWLER_DEDUP=fuzzy"], scrapy_env(redis_url))
    assert result.returncode == 2
    assert result.stderr.strip() == "crawler: error: CRAWLER_DEDUP must be one of exact, bloom, got 'fuzzy'"


def test_a_json_list_on_the_command_line_is_a_list(redis_url: str, make_web, tmp_path: Path) -> None:
    web = make_web(domains=2, pages=4, links=3, size_fixed=2000, private_share=0, cross_share=0, dup_share=0,
                   crawl_delay_share=0)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"{web.url(d)}\n" for d in range(2)))
    # the project's settings (crawler.settings) allow no private address: only this list lets the test web in
    env = scrapy_env(redis_url, settings=None, CRAWLER_CONTACT="ops@example.org")
    result = crawl(redis_url, tmp_path, 'CRAWLER_ALLOW_PRIVATE=["*.test"]', 'CRAWLER_HOST_MAP={"*.test": "127.0.0.1"}',
                   "CRAWLER_DOMAIN_DELAY=0", "CRAWLER_WARC_DIR=", "CLOSESPIDER_TIMEOUT=60", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    fetched = {e.domain for e in web.log() if e.path != "/robots.txt"}
    assert fetched == set(web.domains), result.stderr[-3000:]  # one literal pattern would refuse them all


def test_an_unknown_crawler_setting_is_a_warning_with_the_closest_name(redis_url: str, make_web,
                                                                      tmp_path: Path) -> None:
    """A misspelt CRAWLER_* name, from the command line, the project's
    settings or a spider's custom_settings, is said once, with the name
    meant; the crawl runs."""
    web = make_web(domains=1, pages=3, links=2, size_fixed=1000, private_share=0, cross_share=0, dup_share=0,
                   crawl_delay_share=0)
    (tmp_path / "typo_settings.py").write_text(
        "from devkit.settings import *  # noqa: F403\n"
        'SPIDER_MODULES = ["crawler.spiders", "typo_spiders"]\n'
        "CRAWLER_MAX_DEPHT = 3\n")
    (tmp_path / "typo_spiders.py").write_text(
        "from tests.spiders.exitstatus import ExitStatusSpider\n\n\n"
        "class TypoSpider(ExitStatusSpider):\n"
        '    name = "typo"\n'
        '    custom_settings = {"CRAWLER_LOCK_ENABLD": True}\n')
    env = scrapy_env(redis_url, settings="typo_settings", CRAWLER_CONTACT="ops@example.org")
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    result = crawl(redis_url, tmp_path, "CRAWLER_DOMIAN_DELAY=5", "CRAWLER_ZZZZ=1", env=env, spider="typo",
                   args=("-a", f"start_urls={web.url(0)}"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Spider closed (done)" in result.stderr  # the crawl ran
    warnings = sorted(line.split(" WARNING: ", 1)[1] for line in result.stderr.splitlines()
                      if " WARNING: unknown setting " in line)
    assert warnings == [
        "unknown setting CRAWLER_DOMIAN_DELAY (did you mean CRAWLER_DOMAIN_DELAY?)",
        "unknown setting CRAWLER_LOCK_ENABLD (did you mean CRAWLER_LOCK_ENABLED?)",
        "unknown setting CRAWLER_MAX_DEPHT (did you mean CRAWLER_MAX_DEPTH?)",
        "unknown setting CRAWLER_ZZZZ",
    ], result.stderr[-3000:]
    assert result.stderr.count("unknown setting ") == 4  # once each, and only in log lines


def test_the_project_settings_name_no_unknown_crawler_setting() -> None:
    """The project's settings (and devkit's, the benchmarks' and the
    scripts') use no CRAWLER_* name the registry does not know: the warning
    is only ever for a mistake."""
    import devkit.settings

    assert unknown_names(Settings(vars(devkit.settings))) == []
    used = set()
    for folder in ("crawler", "devkit", "bench", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"\b(CRAWLER_[A-Z0-9_]*[A-Z0-9])\b", path.read_text()))
    assert len(used) > 50  # the pattern still finds them
    assert {name for name in used if name not in BY_NAME} == set()


@pytest.mark.parametrize(("how", "status", "line"), [
    ("stat", 1, "Crawl failed: exitstatus: 3 pages not stored (finish reason finished)"),
    ("reason", 1, "Crawl failed: finish reason frontier_lost"),
    ("clean", 0, None),
])
def test_exit_status_tells_the_truth(redis_url: str, make_web, tmp_path: Path, how: str, status: int,
                                     line: str | None) -> None:
    web = make_web(domains=1, pages=3, links=2, size_fixed=1000, private_share=0, cross_share=0, dup_share=0,
                   crawl_delay_share=0)
    log_file = tmp_path / "crawl.log"  # as Scrapyd runs a job: the log ends with the reason
    result = crawl(redis_url, tmp_path, "SPIDER_MODULES=crawler.spiders,tests.spiders", f"LOG_FILE={log_file}",
                   spider="exitstatus", args=("-a", f"start_urls={web.url(0)}", "-a", f"how={how}"))
    log = log_file.read_text()
    assert result.returncode == status, log[-3000:]
    assert "Traceback" not in log
    if line is None:
        assert "Crawl failed" not in log and "Spider closed (done)" in log
    else:
        assert log.strip().splitlines()[-1].endswith(f"ERROR: {line}"), log[-2000:]


# --- Scrapyd -----------------------------------------------------------------


def test_a_scrapyd_job_that_cannot_start_ends_its_log_with_the_reason(tmp_path: Path) -> None:
    from tests.test_scrapyd import Scrapyd, cluster

    node = Scrapyd(tmp_path / "scrapyd")
    try:
        deployed = cluster("deploy", "--nodes", node.url, "--version", "1")
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("http://d0.test/\n")
        form = [("project", "crawler"), ("spider", "billion"), ("seeds", str(seeds)),
                ("setting", "CRAWLER_CONTACT=ops@example.org"), ("setting", "CRAWLER_DOMAIN_DELAY=nan")]
        with urllib.request.urlopen(f"{node.url}/schedule.json", data=urllib.parse.urlencode(form).encode(),
                                    timeout=30) as resp:
            job = json.loads(resp.read())["jobid"]
        wait_until(lambda: any(j["id"] == job for j in node.jobs().get("finished", [])), 90,
                   f"scrapyd job {job} finished", every=0.1)
        log = (node.dir / "logs" / "crawler" / "billion" / f"{job}.log").read_text()
        assert log.strip().splitlines()[-1].endswith(
            "crawler: error: CRAWLER_DOMAIN_DELAY must be a finite number >= 0, got 'nan'"), log[-2000:]
        assert "Traceback" not in log
    finally:
        node.stop()
