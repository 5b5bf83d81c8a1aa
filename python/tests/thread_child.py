"""Child process of test_threads.py: one scenario per argv[2], run in its own
interpreter so that a crash (SIGSEGV) or a hang is seen as an exit status or
a timeout by the parent. argv[1]: the run directory. Prints one JSON line
"RESULT {...}" that the parent checks."""
import json
import sys
import threading
import time

import numpy as np

import mixprec

OUT, MODE = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
X = rng.normal(size=(512, 8)).astype(np.float32)
Y = np.tanh(X[:, :2])
LAYERS = ["linear:32", "gelu", "linear"]
started = threading.Event()


def config(out, epochs):
    return mixprec.Config(model={"workload": "regressor"},
                          training={"epochs": epochs, "batch_size": 32},
                          output={"dir": out})


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def slow(info):
    """A progress callback that keeps train() busy for seconds."""
    started.set()
    time.sleep(0.002)


if MODE == "close":  # close() from another thread while train() runs
    run = mixprec.Run(config(OUT, 200), data={"x": X, "y": Y}, model=LAYERS, progress=slow,
                      progress_every=1)
    order = []

    def closer():
        started.wait()
        run.close()
        order.append("closed")

    t = threading.Thread(target=closer)
    t.start()
    st = run.train()
    order.append("trained")
    t.join()
    try:
        run.stats
        after = "open"
    except mixprec.Error as e:
        after = str(e)
    result(order=order, stopped=st["stopped"], steps=st["total_steps"], after=after)

elif MODE == "daemon":  # the interpreter exits while a daemon thread is in train()
    run = mixprec.Run(config(OUT, 200), data={"x": X, "y": Y}, model=LAYERS, progress=slow,
                      progress_every=1)
    threading.Thread(target=run.train, daemon=True).start()
    started.wait()
    result(exiting=True)

elif MODE in ("callback_main", "callback_thread"):
    # Every method from inside the progress callback; train() from the main
    # thread (the loop runs on a helper thread) or from a worker thread (the
    # loop runs on the caller's thread).
    seen, refused = {}, {}

    def cb(info):
        run = holder[0]
        if info["step"] != info["total_steps"]:
            return
        seen["evaluate"] = run.evaluate()["loss"]
        seen["summary_steps"] = run.summary()["training_steps"]
        seen["stats_steps"] = run.stats["total_steps"]
        seen["state"] = {k: v.tolist() for k, v in run.state_dict().items()}
        seen["predict"] = run.predict(X[:4]).tolist()
        run.save(OUT + "/in_callback.safetensors")
        for name, call in (("train", lambda: run.train(1)), ("close", run.close)):
            try:
                call()
                refused[name] = None
            except mixprec.Error as e:
                refused[name] = str(e)

    holder = [mixprec.Run(config(OUT, 2), data={"x": X, "y": Y}, model=LAYERS, progress=cb,
                          progress_every=1)]
    box = {}
    if MODE == "callback_main":
        box["st"] = holder[0].train()
    else:
        t = threading.Thread(target=lambda: box.update(st=holder[0].train()))
        t.start()
        t.join()
    run = holder[0]
    plain = mixprec.Run(config(OUT + "_plain", 2), data={"x": X, "y": Y}, model=LAYERS)
    plain.train()
    result(seen=seen, refused=refused, steps=box["st"]["total_steps"],
           evaluate=run.evaluate()["loss"], state={k: v.tolist() for k, v in
                                                   run.state_dict().items()},
           predict=run.predict(X[:4]).tolist(), saved=OUT + "/in_callback.safetensors",
           plain_state={k: v.tolist() for k, v in plain.state_dict().items()})
else:
    sys.exit("unknown mode " + MODE)
