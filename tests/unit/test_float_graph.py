"""models/float_graph.py undoes ONNX Runtime's dynamic quantization: a small float graph (a Conv with a bias, a MatMul
and a bidirectional LSTM), quantized the way Kokoro's was, comes back as float ops giving what the int8 graph gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from models.float_graph import GraphShapeError, atan2_as_torch, dequantize

pytestmark = pytest.mark.unit

HIDDEN = 8


def float_model(rng: np.random.Generator) -> onnx.ModelProto:
    """x [1, 4, 16] → Conv(k 3, bias) → [1, 6, 16] → Transpose → MatMul [6, 12] → LSTM (bidirectional) → y."""

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1]),  # [seq 16, batch 1, 6]
        helper.make_node("MatMul", ["t", "mm_w"], ["m"]),
        helper.make_node(
            "LSTM", ["m", "lstm_w", "lstm_r", "lstm_b"], ["y"], hidden_size=HIDDEN, direction="bidirectional"
        ),
    ]
    weights = [
        weight("conv_w", 6, 4, 3),
        weight("conv_b", 6),
        weight("mm_w", 6, 12),
        weight("lstm_w", 2, 4 * HIDDEN, 12),
        weight("lstm_r", 2, 4 * HIDDEN, HIDDEN),
        weight("lstm_b", 2, 8 * HIDDEN),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["y"], {"x": x})[0])


def test_the_quantized_ops_become_float_ops_that_compute_what_the_int8_ones_do(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    onnx.save(float_model(rng), str(tmp_path / "float.onnx"))
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "int8.onnx", weight_type=QuantType.QUInt8)
    quantized = onnx.load(str(tmp_path / "int8.onnx"))
    ops = {node.op_type for node in quantized.graph.node}
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"} <= ops

    restored = dequantize(quantized)

    left = {node.op_type for node in restored.graph.node}
    assert not left & {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM", "DynamicQuantizeLinear"}
    assert {"Conv", "MatMul", "LSTM"} <= left
    x = rng.standard_normal((1, 4, 16)).astype(np.float32)
    reference, int8, restored_out = run(float_model(np.random.default_rng(7)), x), run(quantized, x), run(restored, x)
    # The float graph is the original's weights as the int8 ones stand for them: closer to the original, on average,
    # than the int8 graph, whose activations are quantized too.
    assert np.abs(restored_out - reference).mean() < np.abs(int8 - reference).mean()
    assert np.corrcoef(restored_out.ravel(), int8.ravel())[0, 1] > 0.99


def test_a_graph_without_the_quantization_chains_it_expects_is_refused() -> None:
    rng = np.random.default_rng(1)
    model = float_model(rng)
    node = helper.make_node("MatMulInteger", ["x", "w8"], ["bare"])  # no DynamicQuantizeLinear before it, no Cast after
    model.graph.node.append(node)
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((16, 2), dtype=np.int8), "w8"))
    with pytest.raises(GraphShapeError):
        dequantize(model)


def exported_atan2() -> onnx.ModelProto:
    """atan2(y, x) as torch exports it: Atan(y / x), then π added or taken away where x < 0 by the sign of y."""
    pi = numpy_helper.from_array(np.array(np.pi, dtype=np.float32), "pi")
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    nodes = [
        helper.make_node("Div", ["y", "x"], ["ratio"]),
        helper.make_node("Atan", ["ratio"], ["a"]),
        helper.make_node("Add", ["a", "pi"], ["up"]),
        helper.make_node("Sub", ["a", "pi"], ["down"]),
        helper.make_node("Greater", ["y", "zero"], ["y_positive"]),
        helper.make_node("Where", ["y_positive", "up", "down"], ["turned"]),
        helper.make_node("Less", ["x", "zero"], ["x_negative"]),
        helper.make_node("Where", ["x_negative", "turned", "a"], ["phase"]),
    ]
    vector = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4]) for name in ("y", "x")]
    out = [helper.make_tensor_value_info("phase", TensorProto.FLOAT, [4])]
    graph = helper.make_graph(nodes, "atan2", vector, out, [pi, zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_atan2_gives_torchs_plus_pi_where_y_is_exactly_zero_and_x_negative() -> None:
    y = np.array([0.0, 1e-7, -1e-7, 0.5], dtype=np.float32)
    x = np.array([-0.3, -0.3, -0.3, 0.5], dtype=np.float32)

    def phase(model: onnx.ModelProto) -> np.ndarray:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return np.asarray(session.run(["phase"], {"y": y, "x": x})[0])

    model = exported_atan2()
    assert phase(model)[0] == pytest.approx(-np.pi)  # the export's rule: y = 0 takes the y < 0 side
    assert atan2_as_torch(model.graph) == 1
    np.testing.assert_allclose(phase(model), np.arctan2(y, x), atol=1e-6)  # torch.atan2 and numpy agree here
