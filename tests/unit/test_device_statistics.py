"""Device-side statistics: CANN writes a tensor's shape as `100x20x40` (and `-` for none); msprobe copies that field
into its statistic.csv for device statistics (its own reader, msprobe/mindspore/dump/dump_processor/
cell_dump_process.py `process_csv`, takes the digits of `Shape` whatever separates them), and CANN's per-op
statistics CSVs carry it too. Fixtures below are built from that description of the writers (labelled: no Ascend
run made them). Counts inferred from Max/Min are lower bounds (counts_exact False); a refused statistic.csv is
named as refused, never as an unknown file name."""
import os

from msoverflow.analysis import analyze
from msoverflow.readers import statistic_csv as sc

HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,Input/Output,Slot,Data Size,Data Type,Format,Shape,"
          "Max Value,Min Value,Avg Value,L2Norm Value\n")


def _step(root, rank=0, step=0):
    folder = os.path.join(root, f"rank_{rank}", "Net", "0", str(step))
    os.makedirs(folder, exist_ok=True)
    return folder


def test_device_shapes_in_statistic_csv_are_read(tmp_path):
    """Built from the writers' description (CANN `AxBxC` shapes, `-` for none): not from an Ascend run."""
    folder = _step(str(tmp_path))
    rows = [
        "MatMul,Default/network-Net/MatMul-op1,1,2,1700000000000001,input,0,32000,float16,ND,100x20x40,3.5,-2,0.1,9",
        "MatMul,Default/network-Net/MatMul-op1,1,2,1700000000000001,output,0,32000,float16,ND,100x20x40,4,-3,0.2,9",
        "Exp,Default/network-Net/Exp-op2,2,2,1700000000000009,input,0,32000,float16,ND,100x20x40,12,-1,0.5,9",
        "Exp,Default/network-Net/Exp-op2,2,2,1700000000000009,output,0,32000,float16,ND,100x20x40,inf,0.3,inf,inf",
        "Cast,Default/network-Net/Cast-op3,3,2,1700000000000011,input,0,0,int32,ND,-,-,-,-,-",
    ]
    with open(os.path.join(folder, "statistic.csv"), "w") as fh:
        fh.write(HEADER + "\n".join(rows) + "\n")
    table = sc.read_table(os.path.join(folder, "statistic.csv"), print)
    events = table.events(range(table.size), 0, "0", 0)
    assert [e.shape for e in events] == [(100, 20, 40)] * 4 + [None]
    report = analyze(str(tmp_path), progress=False)
    assert report.verdict == "anomaly" and report.inconclusive == []
    assert report.first.op_type == "Exp"
    out = report.first.outputs[0].stats
    assert out.posinf >= 1 and out.counts_exact is False       # "Max = inf" says at least one
    frame = report.events()
    assert set(frame["op_type"]) == {"MatMul", "Exp", "Cast"}
    assert not frame.loc[(frame.op_type == "Exp") & (frame.io == "output"), "counts_exact"].iloc[0]


def test_device_shapes_in_per_op_statistics_csv(tmp_path):
    """A CANN per-op statistics file `{op file name}.csv` with `AxB` shapes (built from the documented header)."""
    folder = _step(str(tmp_path))
    name = "Sqrt.Default_network-Net_Sqrt-op4.4.2.1700000000000020.csv"
    with open(os.path.join(folder, name), "w") as fh:
        fh.write("Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value\n"
                 "input,0,8,float32,ND,4x1,4,1,2\noutput,0,8,float16,ND,4x1,70000,1,2\n")
    report = analyze(str(tmp_path), progress=False)
    assert report.verdict == "anomaly" and report.first.op_type == "Sqrt"
    assert report.first.outputs[0].shape == (4, 1) and report.first.outputs[0].stats.counts_exact is False


def test_a_refused_statistic_csv_is_named_as_refused(tmp_path):
    folder = _step(str(tmp_path))
    with open(os.path.join(folder, "statistic.csv"), "w") as fh:
        fh.write("Name,Value\nx,1\n")
    report = analyze(str(tmp_path), progress=False)
    assert report.verdict == "inconclusive"
    reason = " ".join(report.inconclusive)
    assert "refused" in reason and "statistic.csv" in reason
    assert "names msoverflow does not know" not in reason


def test_counts_given_by_the_file_stay_exact():
    stats = sc.stats_from_numbers(4, 0, 1, 0, float("inf"), 1.0, 0, (4,), "float32")
    assert stats.posinf == 1 and stats.counts_exact
    inferred = sc.stats_from_numbers(4, None, None, None, float("inf"), 1.0, None, (4,), "float32")
    assert inferred.posinf == 1 and not inferred.counts_exact
