"""``stream-dp budget`` against a real redis-server."""

from __future__ import annotations

import json

import pytest

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.events import PureDpEvent, RangeBoundedEvent, ZCdpEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.cli import main
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration


@pytest.fixture
def config_file(tmp_path, redis_url, monkeypatch):
    for name in [n for n in __import__("os").environ if n.startswith("STREAM_DP_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "c.toml"
    path.write_text(f'[redis]\nurl = "{redis_url}"\nkey_prefix = "cli"\n'
                    '[budget]\nepsilon = 2.0\ndelta = 1e-5\ndelta_prime = 1e-7\nlifetime_epsilon = 5.0\n')
    return str(path)


@pytest.fixture
def ledger(redis_client):
    return Ledger(redis_client, BudgetCap(2.0, 1e-5, 1e-7), keys=Keys("cli"),
                  lifetime_cap=BudgetCap(5.0, 1e-5, 1e-7, name="budget.lifetime"))


def test_list_show_history_verify(config_file, ledger, redis_client, capsys):
    ledger.charge("2026-11-29", "a.topk", [RangeBoundedEvent(0.1, count=3, delta=1e-7,
                                                              mechanism="limited_domain_topk")])
    ledger.reserve("2026-11-29", "b.alerts", [PureDpEvent(0.5, mechanism="adaptive_svt")])
    capsys.readouterr()
    assert main(["budget", "list", "--config", config_file, "--json"]) == 0
    rows = {r["scope"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"2026-11-29", "lifetime"}
    day = rows["2026-11-29"]
    state = ledger.remaining("2026-11-29")
    assert day["epsilon_spent"] == state.epsilon_spent and day["open_reservations"] == 1
    assert day["epsilon_remaining"] == pytest.approx(2.0 - state.epsilon_spent)
    assert rows["lifetime"]["epsilon_cap"] == 5.0

    ledger.charge("2026-11-30", "z", [ZCdpEvent(0.01)])  # basic ε is infinite: JSON says null
    capsys.readouterr()
    assert main(["budget", "show", "2026-11-30", "--config", config_file, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["basic_epsilon"] is None
    assert main(["budget", "history", "2026-11-30", "--config", config_file, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["basic_epsilon"] is None

    assert main(["budget", "show", "2026-11-29", "--config", config_file]) == 0
    assert "2026-11-29" in capsys.readouterr().out

    assert main(["budget", "history", "2026-11-29", "--config", config_file]) == 0
    text = capsys.readouterr().out
    assert "limited_domain_topk" in text and "reserve" in text and "a.topk" in text

    assert main(["budget", "verify", "--config", config_file]) == 0
    assert "2026-11-29: OK" in capsys.readouterr().out

    redis_client.hset("cli:{ledger:2026-11-29}:totals", "rho", "1")
    assert main(["budget", "verify", "2026-11-29", "--config", config_file, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report[0]["ok"] is False and report[0]["problems"]


def test_scope_may_follow_the_options(config_file, ledger, capsys):
    ledger.charge("2026-11-28", "c.topk", [PureDpEvent(0.25, mechanism="x")])
    capsys.readouterr()
    for action in ("show", "history", "verify"):
        assert main(["budget", action, "--config", config_file, "--json", "2026-11-28"]) == 0, action
        out = json.loads(capsys.readouterr().out)
        assert out and all(r.get("scope", "2026-11-28") == "2026-11-28" for r in out), (action, out)
    with pytest.raises(SystemExit) as info:
        main(["budget", "show", "--config", config_file, "2026-11-28", "extra"])
    assert info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_show_needs_a_scope(config_file, capsys):
    assert main(["budget", "show", "--config", config_file]) == 2
    assert "needs a scope" in capsys.readouterr().err


def test_unreachable_redis_is_a_clear_error(tmp_path, capsys, monkeypatch):
    from stream_dp.processes import free_port

    for name in [n for n in __import__("os").environ if n.startswith("STREAM_DP_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "c.toml"
    path.write_text(f'[redis]\nurl = "redis://127.0.0.1:{free_port()}/0"\nsocket_timeout_seconds = 1.0\n')
    assert main(["budget", "list", "--config", str(path)]) == 1
    assert "cannot read the ledger" in capsys.readouterr().err
