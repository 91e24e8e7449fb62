"""Checkpoints published quantized (engine/prequant.py): every kind Clover may be published in either
loads through transformers' quantizer (its package and kernels here) or is refused naming the method,
with no word of remote code; an unknown method is refused naming it; a malformed quantization_config
is a broken checkpoint (exit 5). Only config.json is needed for a refusal: it comes before any weight."""

from __future__ import annotations

import io
import json

import pytest
from conftest import cli_env, run_cli
from rich.console import Console

from clovercode.engine import prequant
from clovercode.engine.config import EngineConfig
from clovercode.ground.errors import ExitCode, ModelUnavailable

KINDS = {  # quantization_config as each quantizer writes it → the name a refusal must say
    "fp8 block-wise": ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                        "weight_block_size": [128, 128]}, "fp8 (block-wise"),
    "compressed-tensors": ({"quant_method": "compressed-tensors", "format": "float-quantized",
                            "config_groups": {"group_0": {"targets": ["Linear"]}}, "ignore": ["lm_head"],
                            "quantization_status": "compressed"}, "compressed-tensors"),
    "AWQ": ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, "AWQ"),
    "GPTQ": ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}, "GPTQ"),
    "bitsandbytes 4-bit": ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
                            "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}, "bitsandbytes 4-bit"),
    "bitsandbytes 8-bit": ({"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False},
                           "bitsandbytes 8-bit"),
    "torchao": ({"quant_method": "torchao", "quant_type": {"default": {"_type": "Int8WeightOnlyConfig"}}}, "torchao"),
    "FBGEMM fp8": ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}, "FBGEMM fp8"),
    "MXFP4": ({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}, "MXFP4"),
}
REMOTE_WORDS = ("trust", "remote", "auto_map", "own code", "its code")


def folder_with(tmp_path, quantization, nested: bool = False):
    config = {"model_type": "clover", "hidden_size": 64}
    if nested:
        config["text_config"] = {"quantization_config": quantization}
    else:
        config["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_refused_by_name_where_its_kernels_do_not_run_and_loads_where_they_do(tmp_path, kind):
    quantization, label = KINDS[kind]
    folder = folder_with(tmp_path, quantization)
    if "cpu" in prequant.METHODS[quantization["quant_method"]].devices:  # GPTQ (gptqmodel), torchao: CPU kernels
        assert prequant.check(folder, "clover-q", "cpu", installed=lambda package: True).label == label
        with pytest.raises(ModelUnavailable) as err:
            prequant.check(folder, "clover-q", "cpu", installed=lambda package: False)
        assert "not installed)" in err.value.message
    else:
        with pytest.raises(ModelUnavailable) as err:
            prequant.check(folder, "clover-q", "cpu", installed=lambda package: True)
        assert "not on cpu" in err.value.message
    text = f"{err.value.message} {err.value.hint}"
    assert f"this checkpoint is quantized with {label}" in text
    assert "engine.quantization = int8, int4 or fp8" in text and err.value.exit_code == ExitCode.MODEL_UNAVAILABLE
    assert not any(word in text.lower() for word in REMOTE_WORDS), text
    # on CUDA, with the quantizer's packages installed: transformers' quantizer loads it
    assert prequant.check(folder, "clover-q", "cuda:0", installed=lambda package: True).label.startswith(label)
    with pytest.raises(ModelUnavailable, match=r"is not installed|are not installed"):
        prequant.check(folder, "clover-q", "cuda", installed=lambda package: False)


def test_a_missing_package_is_named(tmp_path):
    folder = folder_with(tmp_path, KINDS["AWQ"][0])
    with pytest.raises(ModelUnavailable, match=r"quantized with AWQ; AWQ needs the gptqmodel package and a CUDA GPU "
                                               r"\(gptqmodel is not installed\)"):
        prequant.check(folder, "clover-q", "cuda", installed=lambda package: package != "gptqmodel")


def test_a_config_nested_under_text_config_is_read_and_none_is_no_quantization(tmp_path):
    folder = folder_with(tmp_path, KINDS["GPTQ"][0], nested=True)
    assert prequant.check(folder, "m", "cpu", installed=lambda package: True).label == "GPTQ"  # gptqmodel runs on CPU
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert prequant.check(folder, "m", "cpu") is None


@pytest.mark.parametrize("method", ["hqq", "AQLM", "evil\x1b[2J"])
def test_an_unknown_method_is_refused_naming_it(tmp_path, method):
    folder = folder_with(tmp_path, {"quant_method": method, "bits": 4})
    with pytest.raises(ModelUnavailable) as err:
        prequant.check(folder, "clover-q", "cuda", installed=lambda package: True)
    assert "a method clovercode does not load" in err.value.message and "\x1b" not in err.value.message
    assert (method if method.isprintable() else "evil") in err.value.message
    assert not any(word in err.value.message.lower() for word in REMOTE_WORDS)


@pytest.mark.parametrize("quantization, why", [
    (["awq"], "it is list, not an object"),
    ("fp8", "it is str, not an object"),
    ({}, "it has no quant_method"),
    ({"quant_method": 4}, "its quant_method is int, not a string"),
    ({"quant_method": "awq", "bits": "4"}, "its bits is str, not int"),
    ({"quant_method": "gptq", "bits": True}, "its bits is bool, not int"),
    ({"quant_method": "gptq", "bits": 5}, "its bits is 5, not 2, 3, 4 or 8"),
    ({"quant_method": "fp8", "weight_block_size": "128x128"}, "its weight_block_size is str, not list or null"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}, "exactly one of load_in_4bit"),
    ({"quant_method": "bitsandbytes"}, "exactly one of load_in_4bit"),
])
def test_a_malformed_quantization_config_is_a_broken_checkpoint(tmp_path, quantization, why):
    folder = folder_with(tmp_path, quantization)
    with pytest.raises(ModelUnavailable) as err:
        prequant.check(folder, "clover-q", "cuda", installed=lambda package: True)
    assert "config.json's quantization_config is malformed" in err.value.message and why in err.value.message
    assert err.value.exit_code == ExitCode.MODEL_UNAVAILABLE


@pytest.mark.slow
def test_a_pre_quantized_clover_is_refused_by_name_before_any_code_or_weight_loads(tmp_path):
    from test_engine_fastpaths import clover_shaped

    from clovercode.engine.engine import Engine

    marker = tmp_path / "ran"
    folder = clover_shaped(tmp_path / "clover", marker, quantization_config=KINDS["AWQ"][0])
    with pytest.raises(ModelUnavailable) as err:  # it was "not mapped: quantization_config … trust_remote_code"
        Engine.open(str(folder), EngineConfig(dtype="float32"), Console(file=io.StringIO()))
    text = f"{err.value.message} {err.value.hint}"
    assert "this checkpoint is quantized with AWQ" in text and not any(w in text.lower() for w in REMOTE_WORDS)
    assert not marker.exists()


@pytest.mark.slow
def test_exec_on_a_malformed_quantization_config_exits_5_without_a_traceback(tmp_path):
    import shutil

    from clovercode.engine.sources import tiny_model_dir

    folder = shutil.copytree(tiny_model_dir(), tmp_path / "model")  # clover-tiny's weights, a damaged config
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": ["awq"]}}))
    project = tmp_path / "project"
    project.mkdir()
    proc = run_cli("exec", "-m", str(folder), "--sandbox", "none", "hello", cwd=project,
                   env=cli_env(HOME=str(tmp_path)), timeout=120)
    assert proc.returncode == 5, proc.stderr[-2000:]
    assert "quantization_config is malformed: its quant_method is list, not a string" in proc.stderr
    assert "Traceback" not in proc.stderr
