"""progress=True in Jupyter shows a live widget (executed with nbclient, real kernel)."""

from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.examples.test_notebooks import WIDGET, execute

pytestmark = pytest.mark.cluster
FIT = (
    "import numpy as np\n"
    "import dask_dppca as dd\n"
    "x = np.random.default_rng(0).standard_t(1, size=(3000, 5))  # test data\n"
    "est = dd.DPPCA(2, progress=True).fit(x)\n"
    "print('fitted', est.privacy_['release_placement'])"
)
USER_CLIENT = (
    "from distributed import Client, LocalCluster\n"
    "cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False,\n"
    "                       dashboard_address=None)\n"
    "client = Client(cluster)  # the active (default) client, as a notebook user makes it"
)


def _run(cells: list[str], tmp_path) -> tuple[list, list]:
    """Execute the cells; (outputs per cell, final states of the saved progress bars)."""
    outputs, bars, _ = _run_with_labels(cells, tmp_path)
    return outputs, bars


def _run_with_labels(cells: list[str], tmp_path) -> tuple[list, list, str]:
    """:func:`_run`, and the text of the saved labels (HTML widgets) beside the bars."""
    notebook = new_notebook(cells=[new_code_cell(source) for source in cells])
    execute(notebook, tmp_path)
    outputs = [cell.outputs for cell in notebook.cells]
    saved = notebook.metadata.get("widgets", {}).get(
        "application/vnd.jupyter.widget-state+json", {}
    )
    models = list(saved.get("state", {}).values())
    bars = [model["state"] for model in models if model["model_name"] == "FloatProgressModel"]
    labels = " ".join(
        str(model["state"].get("value", ""))
        for model in models
        if model["model_name"] == "HTMLModel"
    )
    return outputs, bars, labels


def _finished(bars: list) -> bool:
    """The bars were driven to the end while the cell ran (value 1, green)."""
    return bool(bars) and all(
        b.get("value") == 1.0 and b.get("bar_style") == "success" for b in bars
    )


def _has_widget(outputs) -> bool:
    return any(WIDGET in o.get("data", {}) for o in outputs)


def test_progress_widget_is_displayed_with_an_active_client(tmp_path):
    outputs, bars = _run([USER_CLIENT, FIT, "client.close(); cluster.close()"], tmp_path)
    assert _has_widget(outputs[1]) and _finished(bars)
    assert "fitted" in "".join(o.get("text", "") for o in outputs[1])


def test_progress_widget_is_displayed_on_the_embedded_cluster(tmp_path):
    outputs, bars, labels = _run_with_labels([FIT], tmp_path)
    assert _has_widget(outputs[0]) and _finished(bars)
    # The bars are named for people: they showed internal key names
    # (original-dppca-read, dppca-reader-dppca-read-...).
    for stage in ("prepare the input", "pair sums (the kernel)", "add the noise and release"):
        assert stage in labels, labels
    assert "dppca-" not in labels and "original-" not in labels, labels


def test_local_scheduler_progress_is_a_text_bar_in_the_notebook(tmp_path):
    outputs, _ = _run(
        [FIT.replace("progress=True", "progress=True, scheduler='threads'")], tmp_path
    )
    assert "% Completed" in "".join(o.get("text", "") for o in outputs[0])


def test_no_widget_without_progress(tmp_path):
    """The check above can fail: a fit without progress shows no widget."""
    outputs, bars = _run([FIT.replace("progress=True", "progress=False")], tmp_path)
    assert not _has_widget(outputs[0]) and not bars
