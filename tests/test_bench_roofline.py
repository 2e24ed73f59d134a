"""The roofline benchmark's counts: the LSTM's FLOPs it counts by formula are what torch's flop counter sees in a
step loop of `LSTMCell` (forward and backward), and profiler events fall into the parts their names say."""

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.bench_roofline import lstm_flops, part_of


def test_the_lstm_formula_counts_what_torch_counts_in_a_step_loop():
    T, B, F, N = 3, 4, 5, 8
    cell = torch.nn.LSTMCell(F, N)
    x = torch.randn(T, B, F, requires_grad=True)
    counter = FlopCounterMode(display=False)
    with counter:
        h = c = torch.zeros(B, N)
        outputs = []
        for t in range(T):
            h, c = cell(x[t], (h, c))
            outputs.append(h)
        torch.stack(outputs).sum().backward()
    # the step loop's first state is a constant: its hidden product's input gradient is not taken
    first_hidden_grad = 2 * B * 4 * N * N
    assert counter.get_total_flops() == lstm_flops(T, B, F, N) - first_hidden_grad


def test_profiler_events_fall_into_their_parts():
    assert part_of("aten::mkldnn_rnn_layer_backward") == "lstm"
    assert part_of("aten::convolution_backward") == part_of("aten::mkldnn_convolution") == "conv"
    assert part_of("aten::max_pool2d_with_indices_backward") == "pool"
    assert part_of("aten::addmm") == part_of("aten::mm") == "matmul"
    assert part_of("aten::_fused_adam_") == "adam"
    assert part_of("aten::relu") == part_of("aten::mmap_something") == "rest"
