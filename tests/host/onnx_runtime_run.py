"""Runs an ONNX model in ONNX Runtime (the onnxruntime wheel in the project's .venv) on a raw
float32 input and compares its first output with a raw float32 reference.

Usage: python onnx_runtime_run.py MODEL.onnx INPUT.bin SHAPE(1,3,32,32) EXPECTED.bin ABS REL
       [OPTIMIZATION: disabled|basic|extended|all, default all]
Exit 0: within |ort - ref| <= ABS + REL·|ref| everywhere; 1: outside; 2: could not run.
The last line printed is the verdict (callers quote it).
"""
import sys

LEVELS = ("disabled", "basic", "extended", "all")


def main(argv):
    if len(argv) not in (6, 7) or (len(argv) == 7 and argv[6] not in LEVELS):
        print("usage: onnx_runtime_run.py MODEL INPUT SHAPE EXPECTED ABS REL [%s]"
              % "|".join(LEVELS))
        return 2
    model, input_file, shape_text, expected_file, absolute, relative = argv[:6]
    level = argv[6] if len(argv) == 7 else "all"
    try:
        import numpy as np
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.graph_optimization_level = {
            "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        shape = [int(d) for d in shape_text.split(",")]
        x = np.fromfile(input_file, dtype=np.float32).reshape(shape)
        actual = session.run(None, {session.get_inputs()[0].name: x})[0]
        actual = np.asarray(actual, dtype=np.float32).reshape(-1)
    except Exception as e:  # noqa: BLE001 - any failure to run is reported, exit 2
        print("ORT could not run the model: %s" % " ".join(str(e).split())[:400])
        return 2
    expected = np.fromfile(expected_file, dtype=np.float32)
    if actual.size != expected.size:
        print("ORT gives %d values, the reference %d" % (actual.size, expected.size))
        return 1
    diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bound = float(absolute) + float(relative) * np.abs(expected.astype(np.float64))
    bad = int(np.count_nonzero(~(diff <= bound)))  # NaN counts as outside
    worst = float(np.nanmax(diff)) if diff.size else 0.0
    print("onnxruntime %s: %d values, max |ort - lithe| %.9g, %d outside"
          % (ort.__version__, actual.size, worst, bad))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
