"""Secrets never reach output (issue 16): ``stream-dp config check``, config errors and every log line mask
passwords, SASL secrets and credentials inside URLs.

Each secret is set three ways -- an environment variable, a ``*_FILE`` environment variable naming a file,
and the TOML config file -- and everything the processes print (stdout and stderr, logs at DEBUG) is
searched for it. The log filter is also checked on its own, with a deliberately broken variant (no
filter installed) that does leak, so the check has power.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stream_dp import redact
from stream_dp.config import ConfigError, config_from_mapping
from stream_dp.processes import free_port

SASL = "sasl-Secret-4711"
REDIS_PW = "redis-Secret-0815"
URL_PW = "url-Secret-1234"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def _ways(tmp_path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (config file text, extra environment) setting all three secrets one way."""
    port = free_port()
    for name, value in (("sasl", SASL), ("redis", REDIS_PW), ("url", f"redis://app:{URL_PW}@127.0.0.1:{port}/0")):
        (tmp_path / f"{name}.secret").write_text(value + "\n")
    base = "[redis]\nsocket_timeout_seconds = 1.0\n"
    kafka = 'security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\nsasl_username = "svc"\n'
    return {
        "env": (base + "[kafka]\n" + kafka, {
            "STREAM_DP_KAFKA__SASL_PASSWORD": SASL, "STREAM_DP_REDIS__PASSWORD": REDIS_PW,
            "STREAM_DP_REDIS__URL": f"redis://app:{URL_PW}@127.0.0.1:{port}/0"}),
        "file": (base + "[kafka]\n" + kafka, {
            "STREAM_DP_KAFKA__SASL_PASSWORD_FILE": str(tmp_path / "sasl.secret"),
            "STREAM_DP_REDIS__PASSWORD_FILE": str(tmp_path / "redis.secret"),
            "STREAM_DP_REDIS__URL_FILE": str(tmp_path / "url.secret")}),
        "toml": (f'[redis]\nsocket_timeout_seconds = 1.0\npassword = "{REDIS_PW}"\n'
                 f'url = "redis://app:{URL_PW}@127.0.0.1:{port}/0"\n'
                 f'[kafka]\n{kafka}sasl_password = "{SASL}"\n', {}),
    }


def _run(args: list[str], config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args, "--config", str(config)], env={**_clean_env(), **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("way", ["env", "file", "toml"])
def test_config_check_and_worker_logs_never_show_a_secret(tmp_path: Path, way: str) -> None:
    text, env = _ways(tmp_path)[way]
    config = tmp_path / "c.toml"
    config.write_text(text)
    check = _run(["-m", "stream_dp.cli", "--log-level", "DEBUG", "config", "check"], config, env)
    assert check.returncode == 0, check.stderr
    assert '"sasl_password": "***"' in check.stdout and '"password": "***"' in check.stdout
    assert "redis://app:***@127.0.0.1" in check.stdout
    # the workers start, log at DEBUG, fail the Redis preflight (nothing listens) and exit
    outputs = [check.stdout + check.stderr]
    for args in (["-m", "workers.release", "--log-level", "DEBUG"], ["-m", "workers.ingest", "--log-level", "DEBUG"]):
        proc = _run(args, config, env)
        assert proc.returncode != 0
        assert proc.stderr.strip(), "the worker logged nothing"
        outputs.append(proc.stdout + proc.stderr)
    for out in outputs:
        for secret in (SASL, REDIS_PW, URL_PW):
            assert secret not in out, (way, secret, out[-2000:])


def test_a_bad_secret_setting_is_named_without_its_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="redis.url") as err:
        config_from_mapping({"redis": {"url": f"http://u:{URL_PW}@h/0"}}, environ={})
    assert URL_PW not in str(err.value)
    with pytest.raises(ConfigError, match="redis.password") as err:
        config_from_mapping({"redis": {"password": 123456789}}, environ={})
    assert "123456789" not in str(err.value)
    with pytest.raises(ConfigError, match="STREAM_DP_REDIS__PASSWORD_FILE"):
        config_from_mapping({}, environ={"STREAM_DP_REDIS__PASSWORD_FILE": str(tmp_path / "missing")})


def test_config_repr_hides_secrets() -> None:
    cfg = config_from_mapping({"redis": {"url": f"redis://:{URL_PW}@h/0", "password": REDIS_PW},
                               "kafka": {"sasl_password": SASL}}, environ={})
    for secret in (SASL, REDIS_PW, URL_PW):
        assert secret not in repr(cfg)


def test_secrets_are_pydantic_secrets_and_the_url_repr_masks_its_password() -> None:
    """The passwords are ``SecretStr`` (their ``str``, ``repr`` and %-formatting show asterisks; a client asks
    for the value), and ``redis.url`` is a string whose ``repr`` -- what a dataclass dump shows -- masks the
    password, while the URL itself stays whole for the clients and for a config file written for a child."""
    cfg = config_from_mapping({"redis": {"url": f"redis://:{URL_PW}@h/0", "password": REDIS_PW},
                               "kafka": {"sasl_password": SASL, "sasl_mechanism": "PLAIN"}}, environ={})
    for shown in (repr(cfg.redis), repr(cfg.kafka), str(cfg.redis.password), f"{cfg.kafka.sasl_password}",
                  "%s %r" % (cfg.redis.password, cfg.kafka.sasl_password)):
        for secret in (SASL, REDIS_PW, URL_PW):
            assert secret not in shown, shown
    assert "redis://:***@h/0" in repr(cfg.redis)
    assert cfg.redis.password.get_secret_value() == REDIS_PW
    assert cfg.kafka.client_options()["sasl_plain_password"] == SASL
    assert str(cfg.redis.url) == f"redis://:{URL_PW}@h/0"
    assert URL_PW in repr(str(cfg.redis.url))  # broken variant: the plain string's repr leaks, as the field's did
    data = cfg.to_dict()  # a child's config file carries the values, as plain strings
    assert (data["redis"]["password"], data["kafka"]["sasl_password"]) == (REDIS_PW, SASL)
    assert type(data["redis"]["url"]) is str and type(data["redis"]["password"]) is str
    assert redact.redacted_config(cfg)["redis"]["password"] == "***"


def test_a_validation_error_never_shows_a_secret() -> None:
    """Wrong-typed or out-of-range secrets, and a section built by hand, are named without their value."""
    with pytest.raises(ConfigError, match="kafka.sasl_password must be a string .value not shown") as err:
        config_from_mapping({"kafka": {"sasl_password": 4711_0815}}, environ={})
    assert "47110815" not in str(err.value)
    with pytest.raises(ConfigError, match="redis.url must be empty or a redis://") as err:
        config_from_mapping({}, environ={"STREAM_DP_REDIS__URL": f"https://u:{URL_PW}@h/0"})
    assert URL_PW not in str(err.value) and "STREAM_DP_REDIS__URL" in str(err.value)


def _log_through(filtered: bool) -> str:
    cfg = config_from_mapping({"redis": {"url": f"redis://:{URL_PW}@h/0", "password": REDIS_PW},
                               "kafka": {"sasl_password": SASL}}, environ={})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logging.getLogger("test.redaction")
    log.addHandler(handler)
    log.propagate = False
    if filtered:
        redact.register_config_secrets(cfg)
        handler.addFilter(redact.RedactingFilter())
    try:
        log.warning("connecting to %s with %s", cfg.redis.url, cfg.redis.password)
        log.error(f"sasl login failed for svc/{SASL}")
        try:
            raise RuntimeError(f"AUTH {REDIS_PW} rejected")
        except RuntimeError:
            log.exception("redis said no")
    finally:
        log.removeHandler(handler)
    return stream.getvalue()


def test_every_log_line_masks_secrets_and_the_unfiltered_variant_leaks() -> None:
    clean = _log_through(filtered=True)
    assert "***" in clean and "redis said no" in clean and "RuntimeError" in clean
    for secret in (SASL, REDIS_PW, URL_PW):
        assert secret not in clean
    leaky = _log_through(filtered=False)  # broken variant: no filter
    assert all(secret in leaky for secret in (SASL, REDIS_PW, URL_PW))


def test_an_uncaught_exception_is_masked_too(tmp_path: Path) -> None:
    script = ("import sys; from stream_dp import redact; redact.install(); "
              f"raise RuntimeError('cannot reach redis://u:{URL_PW}@h/0')")
    proc = subprocess.run([sys.executable, "-c", script], env=_clean_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "RuntimeError" in proc.stderr and "redis://u:***@h/0" in proc.stderr
    assert URL_PW not in proc.stderr
