"""The Kokoro int8 graph with its weights dequantized: the float graph a bf16-capable runtime can run.

The shipped graph is ONNX Runtime's dynamic quantization of the fp32 export: each MatMul and Conv became
`DynamicQuantizeLinear` (the activation) → `MatMulInteger`/`ConvInteger` (int8/uint8 weights) → `Cast` → `Mul` (the
two scales), a Conv's bias added in int32 before the Cast, and each LSTM a `DynamicQuantizeLSTM`. `dequantize`
replaces each such chain by one float `MatMul`/`Conv`/`LSTM` whose weights are `(q - zero_point) * scale`: the
numbers the int8 kernels stood for, without re-quantizing the activations. What is left of the quantization
(the embedding tables' `DequantizeLinear`) is standard ONNX and stays.

`atan2_as_torch` fixes one thing of the export that only shows on a runtime other than ONNX Runtime: see there.
`float_ir` keeps that graph as OpenVINO's IR, its sine generator marked to stay in f32 under bf16 (`F32_SCOPE`);
`python -m models.float_graph` derives it beside the assembled model (./run.sh does, where the route may use it), so
that a node's first load does not.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx


class GraphShapeError(Exception):
    """The graph does not hold the quantization chains this module undoes."""


def dequantize(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float copy of `model` (the int8 Kokoro graph): every MatMulInteger, ConvInteger and DynamicQuantizeLSTM
    replaced, the nodes only they used dropped."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    init = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def array(name: str) -> np.ndarray:
        if name not in init:
            raise GraphShapeError(f"{name!r} is not a weight")
        return numpy_helper.to_array(init[name])

    def only(tensor: str, op_type: str) -> onnx.NodeProto:
        found = consumers.get(tensor, [])
        if len(found) != 1 or found[0].op_type != op_type:
            raise GraphShapeError(f"expected one {op_type} after {tensor!r}, found {[n.op_type for n in found]}")
        return found[0]

    def source(quantized: str) -> str:
        """The float tensor a DynamicQuantizeLinear output quantizes."""
        node = producer.get(quantized)
        if node is None or node.op_type != "DynamicQuantizeLinear":
            raise GraphShapeError(f"{quantized!r} does not come from a DynamicQuantizeLinear")
        return node.input[0]

    added: dict[str, onnx.TensorProto] = {}

    def weight(name: str, values: np.ndarray) -> str:
        """A float weight; one a second node shares (the same quantized tensor) is added once."""
        if name not in added:
            added[name] = numpy_helper.from_array(values.astype(np.float32), name)
        return name

    def four_inputs(node: onnx.NodeProto) -> list[str]:
        """x, quantized weight, x's zero point, the weight's zero point."""
        if len(node.input) != 4:
            raise GraphShapeError(f"{node.name}: {len(node.input)} inputs, not the quantizer's 4")
        return list(node.input)

    replaced: dict[int, onnx.NodeProto] = {}  # index of the node the float one stands in for → the float node
    for index, node in enumerate(graph.node):
        if node.op_type == "MatMulInteger":
            x, wq, _, wzp = four_inputs(node)
            cast = only(node.output[0], "Cast")
            mul = only(cast.output[0], "Mul")
            w = (array(wq).astype(np.float32) - array(wzp).astype(np.float32)) * _weight_scale(producer, init, mul)
            inputs = [source(x), weight(wq + "_float", w)]
            replaced[index] = helper.make_node("MatMul", inputs, [mul.output[0]], name=mul.output[0] + "_float")
        elif node.op_type == "ConvInteger":
            x, wq, _, wzp = four_inputs(node)
            after = consumers[node.output[0]]
            bias: str | None = None
            if len(after) == 1 and after[0].op_type == "Add":
                bias = _float_bias(producer, init, next(i for i in after[0].input if i != node.output[0]))
                cast = only(after[0].output[0], "Cast")
            else:
                cast = only(node.output[0], "Cast")
            mul = only(cast.output[0], "Mul")
            scale = _weight_scale(producer, init, mul)
            w = (array(wq).astype(np.float32) - array(wzp).astype(np.float32)) * np.reshape(scale, (-1, 1, 1))
            inputs = [source(x), weight(wq + "_float", w), *([bias] if bias else [])]
            conv = helper.make_node("Conv", inputs, [mul.output[0]], name=mul.output[0] + "_float")
            conv.attribute.extend(node.attribute)
            replaced[index] = conv
        elif node.op_type == "DynamicQuantizeLSTM":
            x, w, r, b, lens, h0, c0, p, ws, wzp, rs, rzp = (list(node.input) + [""] * 12)[:12]
            if p:
                raise GraphShapeError(f"{node.name}: peepholes are not handled")

            def lstm_weight(q: str, scale: str, zero: str) -> np.ndarray:
                values = array(q).astype(np.float32) - array(zero).astype(np.float32).reshape(-1, 1, 1)
                return np.transpose(values * array(scale).reshape(-1, 1, 1), (0, 2, 1))  # [dirs, 4 hidden, in]

            inputs = [x, weight(w + "_float", lstm_weight(w, ws, wzp)), weight(r + "_float", lstm_weight(r, rs, rzp))]
            inputs += [b, lens, h0, c0]
            while inputs and not inputs[-1]:
                inputs.pop()
            lstm = helper.make_node("LSTM", inputs, list(node.output), name=node.output[0] + "_float")
            lstm.attribute.extend(node.attribute)
            replaced[index] = lstm
    taken = {out for node in replaced.values() for out in node.output}
    nodes = [
        replaced.get(i, node)
        for i, node in enumerate(graph.node)
        if i in replaced or not taken.intersection(node.output)  # the Mul a float node now stands for goes
    ]
    graph.initializer.extend(added.values())
    _keep_only_used(graph, nodes)
    atan2_as_torch(graph)
    return model


def atan2_as_torch(graph: onnx.GraphProto) -> int:
    """Make each exported `atan2(y, x)` give torch's +π, not -π, where y is exactly 0 and x < 0; returns how many.

    The export spells atan2 as `Atan(y / x)` corrected by `Where(x < 0, Where(y > 0, a + π, a - π), a)`. Kokoro's
    generator feeds the phase of the source's STFT to its noise convolutions as a plain number, and over silence the
    source is a constant: the DC bin's imaginary part is then 0, its phase ±π depending on that part's sign. ONNX
    Runtime's STFT leaves about 1e-7 there (→ +π, as torch.atan2(+0, x < 0) gives, which the model was trained on);
    OpenVINO's is exactly 0 (→ -π). That one flipped input made OpenVINO's audio 0.86x as loud with a log-spectrum
    correlation of 0.88 against ONNX Runtime on this same graph; with `y >= 0` they agree (0.99)."""
    producer = {out: node for node in graph.node for out in node.output}
    fixed = 0
    for node in graph.node:
        if node.op_type != "Atan" or (div := producer.get(node.input[0])) is None or div.op_type != "Div":
            continue
        numerator = div.input[0]
        for where in graph.node:
            test = producer.get(where.input[0]) if where.op_type == "Where" and where.input else None
            if test is not None and test.op_type == "Greater" and test.input[0] == numerator:
                test.op_type = "GreaterOrEqual"
                fixed += 1
    return fixed


def _scalar_or_vector(init: dict[str, onnx.TensorProto], name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    return numpy_helper.to_array(init[name]).astype(np.float32) if name in init else None


def _weight_scale(
    producer: dict[str, onnx.NodeProto], init: dict[str, onnx.TensorProto], mul: onnx.NodeProto
) -> np.ndarray:
    """The weight's scale out of the `Mul` that applies activation scale × weight scale."""
    for name in mul.input:
        scales = producer.get(name)
        if scales is not None and scales.op_type == "Mul":
            found = [s for s in (_scalar_or_vector(init, i) for i in scales.input) if s is not None]
            if len(found) == 1:
                return found[0]
    raise GraphShapeError(f"{mul.name}: no activation × weight scale among its inputs")


def _float_bias(producer: dict[str, onnx.NodeProto], init: dict[str, onnx.TensorProto], quantized: str) -> str:
    """The float bias initializer that a quantized bias (Reshape ← Cast ← Floor ← Div(bias, scale)) was made from."""
    node = producer.get(quantized)
    for op_type in ("Reshape", "Cast", "Floor", "Div"):
        if node is None or node.op_type != op_type:
            raise GraphShapeError(f"{quantized!r}: not a quantized bias")
        if op_type == "Div":
            if node.input[0] not in init:
                raise GraphShapeError(f"{node.name}: the bias is not a weight")
            return str(node.input[0])
        node = producer.get(node.input[0])
    raise AssertionError("unreachable")


def _keep_only_used(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    """Set `graph`'s nodes to those of `nodes` the outputs depend on (order kept), and drop unused initializers."""
    producer = {out: i for i, node in enumerate(nodes) for out in node.output}
    needed = {out.name for out in graph.output}
    keep: set[int] = set()
    stack = list(needed)
    while stack:
        name = stack.pop()
        i = producer.get(name)
        if i is None or i in keep:
            continue
        keep.add(i)
        for inp in nodes[i].input:
            if inp and inp not in needed:
                needed.add(inp)
                stack.append(inp)
        for attr in nodes[i].attribute:  # subgraphs (none in Kokoro today) would read outer names
            if attr.g.node:
                raise GraphShapeError(f"{nodes[i].name}: subgraphs are not handled")
    del graph.node[:]
    graph.node.extend(node for i, node in enumerate(nodes) if i in keep)
    used = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(used)


F32_SCOPE = "/m_source/l_sin_gen/"
"""The harmonic source's sine generator: it sums the F0 curve sample by sample into a phase (a CumSum over the
whole window, times 2π and the upsampling factor) and takes its sine. In bf16 that phase keeps 8 significant bits,
so the sines fall apart the longer the window: at 130 tokens (a 120-character step) bf16's audio was 0.83x int8's
loudness with a log-spectrum correlation of 0.949; with these nodes kept in f32, 0.92x and 0.977 (300 tokens: 0.66x
and 0.897 before, 0.81x and 0.961 after), for no measurable time."""

F32_KINDS = frozenset({"Multiply", "Divide", "Add", "Subtract", "CumSum", "Interpolate", "Sin"})
"""The float operations of that scope kept in f32 (its comparisons and casts have no float output to keep)."""

IR_RECIPE = 1
"""Bumped whenever the derived IR changes, so that a cached one is derived again."""


def float_ir(int8_model: Path, folder: Path) -> Path:
    """The OpenVINO IR (`model.xml` and its weights) of `int8_model`'s float copy in `folder`, the sine generator's
    nodes marked to stay in f32 under a bf16 inference precision (`F32_SCOPE`); derived once and kept (about 330 MB)
    beside a stamp of the model's sha256 (the one its assembly recorded, else read from the file) and `IR_RECIPE`,
    and derived again when either changes. Written whole or not at all."""
    import hashlib

    from models.assemble import model_sum

    digest = model_sum(int8_model.parent) or hashlib.sha256(int8_model.read_bytes()).hexdigest()
    stamp = f"{digest} recipe {IR_RECIPE}\n"
    xml = folder / "model.xml"
    if _stamped(folder, stamp) and xml.is_file():
        return xml
    import onnx  # only to derive: importing it takes 0.8 s, at every load and every ./run.sh setup
    import openvino as ov

    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    work.chmod(0o755)
    try:
        data = dequantize(onnx.load(str(int8_model))).SerializeToString()
        ov.save_model(ov.Core().read_model(io.BytesIO(data)), str(work / "model.xml"), compress_to_fp16=False)
        (work / "model.xml").write_text(keep_in_f32((work / "model.xml").read_text(encoding="utf-8")), "utf-8")
        (work / "stamp").write_text(stamp)
        if _stamped(folder, stamp):
            return xml  # another process derived it meanwhile: its copy stays, for whoever reads it now
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(work, folder)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return xml


def _stamped(folder: Path, stamp: str) -> bool:
    return (folder / "stamp").is_file() and (folder / "stamp").read_text() == stamp


_LAYER = re.compile(r'<layer id="\d+" name="(?P<name>[^"]*)" type="(?P<kind>[^"]*)"[^>]*>')
_KEEP = '\n\t\t\t<rt_info>\n\t\t\t\t<attribute name="DisablePrecisionConversion" version="0" value="dynamic:dynamic" />\n\t\t\t</rt_info>'


def keep_in_f32(xml: str) -> str:
    """The IR with every float layer of `F32_SCOPE` marked to keep its precision: OpenVINO's CPU plugin leaves a
    node whose conversion is disabled out of its bf16 inference precision (it reads the mark from the IR's rt_info).
    Raises GraphShapeError where the IR has no such layer."""
    parts, end, marked = [], 0, 0
    for layer in _LAYER.finditer(xml):
        parts.append(xml[end : layer.end()])
        end = layer.end()
        if F32_SCOPE in layer["name"] and layer["kind"] in F32_KINDS:
            parts.append(_KEEP)
            marked += 1
    if not marked:
        raise GraphShapeError(f"no layer of {F32_SCOPE} to keep in f32")
    parts.append(xml[end:])
    return "".join(parts)


def main() -> int:
    """Derive the float IR beside the model the service's settings place (`models.assemble.Destination`); exit 1,
    saying why, where it cannot be."""
    from models.assemble import DERIVED_FOLDER, MODEL_FILE, Destination, log

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    folder = Destination().folder
    started = time.perf_counter()
    try:
        xml = float_ir(folder / MODEL_FILE, folder / DERIVED_FOLDER)
    except (OSError, GraphShapeError, ImportError) as exc:
        log.error("cannot derive the float graph of %s for Kokoro's OpenVINO routes: %s", folder / MODEL_FILE, exc)
        return 1
    log.info("Kokoro's float graph for OpenVINO: %s (%.1fs)", xml, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
