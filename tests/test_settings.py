from pathlib import Path

import pytest

from gpuledger.settings import SettingsError, load_settings


def test_defaults_are_embedded_in_data_dir(tmp_path: Path) -> None:
    s = load_settings(env={}, overrides={"warehouse": {"data_dir": str(tmp_path / "d")}})
    assert s.warehouse.embedded
    assert s.warehouse.resolved_dsn == f"chdb://{tmp_path / 'd'}"
    assert s.ledger.idle_policy == "weighted"


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        '[ledger]\nidle_threshold_ratio = 0.1\ncurrency = "EUR"\n[simulator]\ngpus = 16\n'
    )
    s = load_settings(
        cfg,
        env={"GPULEDGER_LEDGER__CURRENCY": "GBP", "GPULEDGER_SIMULATOR__SEED": "7"},
        overrides={"simulator": {"gpus": 32}},
    )
    assert s.ledger.idle_threshold_ratio == 0.1
    assert s.ledger.currency == "GBP"
    assert s.simulator.seed == 7
    assert s.simulator.gpus == 32


def test_server_dsn_selects_server() -> None:
    s = load_settings(env={"GPULEDGER_WAREHOUSE__DSN": "https://u:p@ch.example:8443/gpuledger"})
    assert not s.warehouse.embedded


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[ledger]\nidle_treshold_ratio = 0.1\n", "'idle_treshold_ratio'"),
        ("[leger]\nx = 1\n", "unknown section 'leger'"),
        ("[ledger]\nidle_threshold_ratio = 5\n", "ledger.idle_threshold_ratio 5.0 must be within"),
        ("[ledger]\nidle_policy = 'share'\n", "'share' is not one of weighted, even, none"),
        ("[simulator]\ngpus = 'many'\n", "simulator.gpus = 'many'"),
        ("[warehouse]\ndsn = 'postgres://x'\n", "is not a ClickHouse DSN"),
        ("[warehouse]\ncluster = 'prod; DROP'\n", "warehouse.cluster 'prod; DROP' is not a plain"),
        ("[server]\nforward_timeout_s = 0\n", "server.forward_timeout_s 0.0 must be positive"),
        ("[server]\nlive_tail_s = 1\n", "server.live_tail_s 1.0 must be 0 (off) or 5 to 3600"),
        ("[ledger\n", "is not valid TOML"),
    ],
)
def test_bad_file_names_the_key(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(SettingsError) as err:
        load_settings(cfg, env={})
    assert needle in str(err.value)


def test_typo_gets_a_suggestion(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[ledger]\nidle_treshold_ratio = 0.1\n")
    with pytest.raises(SettingsError, match="Did you mean 'idle_threshold_ratio'"):
        load_settings(cfg, env={})


def test_unknown_environment_variable_is_rejected() -> None:
    with pytest.raises(SettingsError, match="GPULEDGER_WAREHOUSE__DNS"):
        load_settings(env={"GPULEDGER_WAREHOUSE__DNS": "chdb:///x"})
    with pytest.raises(SettingsError, match="GPULEDGER_DSN"):
        load_settings(env={"GPULEDGER_DSN": "chdb:///x"})


def test_bad_env_value_names_variable_source() -> None:
    with pytest.raises(SettingsError, match=r"server.port = 'http' \(from the environment\)"):
        load_settings(env={"GPULEDGER_SERVER__PORT": "http"})


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", env={})


def test_retention_order_is_checked() -> None:
    with pytest.raises(SettingsError, match="raw_retention_days must not exceed"):
        load_settings(env={"GPULEDGER_WAREHOUSE__RAW_RETENTION_DAYS": "400"})


@pytest.mark.parametrize(
    ("data_dir", "needle"),
    [
        ("/tmp/" + "x" * 300, "a name of 300 bytes"),
        ("/tmp/" + "/".join(["y" * 200] * 20), "4024 bytes long"),
        ("/tmp/a\0b", "NUL"),
    ],
)
def test_a_data_dir_no_file_system_takes_is_refused(data_dir: str, needle: str) -> None:
    with pytest.raises(SettingsError, match=needle) as err:
        load_settings(env={}, overrides={"warehouse": {"data_dir": data_dir}})
    assert "warehouse.data_dir" in str(err.value)


@pytest.mark.parametrize("gpus", [0, 7, 60])
def test_simulated_gpus_fill_whole_nodes(gpus: int) -> None:
    """`gpuledger demo --gpus 7` is a setting refused in one line, not the simulator's
    ValueError with a traceback."""
    with pytest.raises(SettingsError, match=f"simulator.gpus {gpus} must be a positive multiple"):
        load_settings(env={}, overrides={"simulator": {"gpus": gpus}})
    assert load_settings(env={}, overrides={"simulator": {"gpus": 16}}).simulator.gpus == 16


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("pod_resources_socket", "kubelet.sock", "must be the absolute path"),
        (
            "pod_resources_socket",
            "unix:///var/lib/kubelet/pod-resources/kubelet.sock",
            "no unix://",
        ),
        ("pod_resources_socket", "/" + "d" * 120, "longer than a unix socket path"),
        ("pod_resources_refresh_s", 0, "agent.pod_resources_refresh_s 0.0 must be positive"),
        ("pod_resource_socket", "/x", "Did you mean 'pod_resources_socket'"),
    ],
)
def test_pod_resources_settings_are_checked(key: str, value: object, needle: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(env={}, overrides={"agent": {key: value}})
    assert needle in str(err.value)


def test_pod_resources_socket_defaults_to_off() -> None:
    s = load_settings(env={})
    assert s.agent.pod_resources_socket == "" and s.agent.pod_resources_refresh_s == 10.0
    s = load_settings(
        env={"GPULEDGER_AGENT__POD_RESOURCES_SOCKET": "/var/lib/kubelet/pod-resources/kubelet.sock"}
    )
    assert s.agent.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
