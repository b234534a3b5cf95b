"""Tests of kernel_trace.py on hand-made traces (standard library only)."""
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_trace  # noqa: E402


def line(slot, label, marks):
    """marks: {mark: (blocks, earliest_ns, latest_ns)}; the others empty."""
    fields = [f"{b} {lo} {hi}" for b, lo, hi in (marks.get(m, (0, 0, 0)) for m in range(8))]
    return "\t".join(["ktrace", str(slot), label] + fields) + "\n"


def gemv(slot, label, entry, wait, wait_last, exit_, blocks=384):
    return line(slot, label, {0: (blocks, entry, entry + 50), 1: (blocks, wait, wait_last),
                              7: (blocks, exit_ - 100, exit_)})


class KernelTraceTest(unittest.TestCase):
    def setUp(self):
        # An eager warm-up long before, then the replay: two layers of q/k/v
        # GEMV and attention. Times in ns.
        self.lines = [
            "unrelated log line\n",
            gemv(0, "gemv/rope m=1 n=3072 k=2048", 1_000, 2_000, 2_050, 6_000),
            gemv(1, "gemv/rope m=1 n=3072 k=2048", 900_000, 1_000_000, 1_000_080, 1_004_000),
            line(2, "attention/decode_v2 rows=1 hd=64 splits=40 cluster=8",
                 {0: (64, 1_003_000, 1_003_500), 1: (64, 1_004_900, 1_005_100),
                  2: (64, 1_003_400, 1_004_000), 4: (40, 1_006_000, 1_008_000),
                  7: (64, 1_009_000, 1_012_900)}),
            gemv(3, "gemv/rope m=1 n=3072 k=2048", 1_012_000, 1_014_000, 1_014_020, 1_018_000),
            line(4, "attention/decode_v2 rows=1 hd=64 splits=40 cluster=8",
                 {0: (64, 1_017_000, 1_017_500), 1: (64, 1_018_900, 1_019_100),
                  2: (64, 1_017_400, 1_018_000), 4: (40, 1_020_000, 1_022_000),
                  7: (64, 1_023_000, 1_026_900)}),
        ]

    def test_parse_reads_every_mark(self):
        launches = kernel_trace.parse(self.lines)
        self.assertEqual([l.slot for l in launches], [0, 1, 2, 3, 4])
        self.assertEqual(launches[2].marks[4], (40, 1_006_000, 1_008_000))
        self.assertFalse(launches[2].has(3))

    def test_malformed_lines_are_refused(self):
        with self.assertRaises(ValueError):
            kernel_trace.parse(["ktrace\t1\tgemv\t1 2 3\n"])

    def test_the_last_run_leaves_out_the_warm_up(self):
        run = kernel_trace.last_run(kernel_trace.parse(self.lines), split_ns=100_000)
        self.assertEqual([l.slot for l in run], [1, 2, 3, 4])

    def test_durations_gaps_and_leads_are_averaged_per_label(self):
        run = kernel_trace.last_run(kernel_trace.parse(self.lines), split_ns=100_000)
        order, rows = kernel_trace.summarise(run)
        self.assertEqual(order, ["gemv/rope m=1 n=3072 k=2048",
                                 "attention/decode_v2 rows=1 hd=64 splits=40 cluster=8"])
        qkv = rows[order[0]]
        self.assertEqual(qkv["dur"], [4.0, 4.0])
        self.assertEqual(qkv["gap"], [0.0, 1.1])  # the first has no predecessor
        self.assertEqual(qkv["lead"], [100.0, 2.0])
        attention = rows[order[1]]
        self.assertAlmostEqual(attention["dur"][0], 8.0)
        self.assertAlmostEqual(attention["gap"][0], 0.9)
        self.assertAlmostEqual(attention["lead"][0], 1.9)
        self.assertAlmostEqual(attention["spread"][0], 0.2)
        self.assertEqual(attention["phases"][4], [(1.1, 3.1), (1.1, 3.1)])
        # Gaps by predecessor: the second q/k/v follows an attention.
        self.assertEqual(qkv["gap_after"], {order[1]: [1.1]})
        self.assertEqual(list(attention["gap_after"]), [order[0]])
        self.assertAlmostEqual(attention["gap_after"][order[0]][1], 0.9)

    def test_report_names_the_attention_phases(self):
        out = io.StringIO()
        kernel_trace.report(kernel_trace.parse(self.lines), split_us=100.0, out=out)
        text = out.getvalue()
        self.assertIn("step: 4 launches", text)
        self.assertIn("key loop done", text)
        self.assertIn("early reads issued", text)
        self.assertIn("gaps by the launch before", text)
        self.assertRegex(text, r"attention/decode_v2 rows=1 hd=64 splits= +-> gemv/rope m=1 n=3072 "
                               r"k=2048 +1 +1\.10 +1\.10 +1\.10")

    def test_an_empty_trace_says_so(self):
        out = io.StringIO()
        kernel_trace.report([], split_us=100.0, out=out)
        self.assertIn("no complete traced launches", out.getvalue())


class PhaseNamesTest(unittest.TestCase):
    def test_the_fused_o_projection_has_its_own_phases(self):
        fused = kernel_trace.phase_names("attention/decode_v2+o rows=1 hd=64 splits=8 cluster=8")
        self.assertEqual(fused[5], "o weights landed")
        plain = kernel_trace.phase_names("attention/decode_v2 rows=1 hd=64 splits=8 cluster=8")
        self.assertEqual(plain[5], "block merge done")

    def test_gemvs_name_their_phases_and_other_kernels_have_none(self):
        gemv = kernel_trace.phase_names("gemv/rope m=1 n=3072 k=2048")
        self.assertEqual(gemv[2], "inputs staged")
        self.assertEqual(gemv[4], "last unit stored")
        self.assertEqual(gemv[5], "first weights landed")
        self.assertEqual(gemv[6], "second batch multiplied")
        self.assertNotIn(7, gemv)  # the exit mark
        mma = kernel_trace.phase_names("gemv/mma-residual m=1 n=2048 k=8192")
        self.assertEqual(mma[3], "first batch multiplied")
        self.assertEqual(kernel_trace.phase_names("embedding rows=1"), {})


if __name__ == "__main__":
    unittest.main()
