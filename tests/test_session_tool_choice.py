"""Who asks for tool_choice: runs nobody watches (fix, exec, eval) ask for engine.tool_choice
("required" by default), the REPL never does, and the setting turns it off."""

from clovercode.ground.config import load_config
from clovercode.wiring.session import generation_params, open_session


def test_unattended_runs_ask_for_required_and_the_repl_for_nothing(tmp_path):
    cfg = load_config(tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert generation_params(cfg, unattended=True).tool_choice == "required"
    assert generation_params(cfg, unattended=False).tool_choice is None
    assert generation_params(cfg, unattended=True).max_prose == 512


def test_the_setting_chooses_or_turns_it_off(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    for value, expected in (("auto", "auto"), ("off", None), ("required", "required")):
        cfg = load_config(tmp_path, {**env, "CLOVERCODE_ENGINE_TOOL_CHOICE": value})
        assert generation_params(cfg, unattended=True).tool_choice == expected


def test_sessions_know_whether_anybody_watches(tmp_path):
    cfg = load_config(tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}, {"sandbox": "none"})

    class Silent:  # the model seam; no turn is run here
        name = "silent"

        def close(self):
            pass

    for interactive, unattended, expected in ((False, None, True), (True, None, False), (True, True, True)):
        session = open_session(tmp_path, cfg, interactive=interactive, unattended=unattended, env={},
                               backend=Silent())
        assert session.unattended is expected
        session.close()
