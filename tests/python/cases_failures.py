"""Cases: errors, a killed rank, re-initialisation, late ranks, threads, exits, use after
free, a launcher's and a user's mistakes, a second group and teardown."""
import copy
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import rdmacoll_torch
from case_support import TORCH2, DistBackendError, init, expect_equal


def case_errors():
    """Wrong shapes raise RuntimeError with rdmacoll's message on every rank; the group stays
    usable."""
    rank, p = init()
    out = torch.zeros(p * 4 + (1 if rank == 1 else 0))
    try:
        dist.all_gather_into_tensor(out, torch.zeros(4))
        raise AssertionError("no error for a wrong output size")
    except RuntimeError as e:
        want = "rejected its arguments" if rank != 1 else "expected group size"
        assert want in str(e), str(e)
    try:
        dist.all_reduce(torch.zeros(3 if rank == 0 else 4))
        raise AssertionError("no error for mismatched sizes")
    except RuntimeError as e:
        assert "ranks disagree" in str(e), str(e)
    try:
        dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * p + 1))
        raise AssertionError("no error for a wrong reduce_scatter input")
    except RuntimeError as e:
        assert "reduce_scatter_tensor" in str(e), str(e)
    t = torch.full((4,), float(rank))
    dist.all_reduce(t)
    expect_equal(t, torch.full((4,), float(sum(range(p)))), "usable after errors")
    dist.barrier()
    dist.destroy_process_group()


def case_killed():
    """A rank killed mid-run: the others raise within the (short) timeout, never hang."""
    rank, p = init(timeout_s=15)
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    done = torch.zeros(1)
    if rank == p - 1:  # dies once the others are past the warm-up (it only receives)
        for r in range(p - 1):
            dist.recv(done, r)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.send(done, p - 1)
    start = time.time()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
        raise AssertionError("no error after a peer died")
    except RuntimeError as e:
        took = time.time() - start
        assert took < 20, f"took {took:.1f} s"
        assert isinstance(e, DistBackendError), type(e)  # torch 2.x: a communication error
        print(f"ok killed: rank {rank} raised after {took:.2f} s: {str(e)[:120]}", flush=True)
    os._exit(0)  # the world is broken; torch's store host may be the dead rank


def case_set_timeout():
    """torch.distributed.set_timeout on rdmacoll: rank 0 cuts its group's timeout to 1 s and its
    all_reduce, which rank 1 never joins, raises within seconds, not the 120 s it was made with."""
    rank, p = init(timeout_s=120)
    if rank == 0:
        dist.set_timeout(datetime.timedelta(seconds=1))
        start = time.time()
        try:
            dist.all_reduce(torch.ones(4))
            raise AssertionError("no timeout")
        except RuntimeError as e:
            took = time.time() - start
            assert 0.9 < took < 10, f"raised after {took:.1f} s"
            assert "timed out after 1000 ms" in str(e), str(e)
    dist.destroy_process_group()


def case_shrink():
    """torch.distributed.shrink_group on rdmacoll: rank 2 is killed; the survivors' next
    all_reduce raises, they shrink the default group without it (no message: each alone) and
    carry on in it, every element right, then shrink a group of their own again."""
    rank, p = init(timeout_s=20)
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    done = torch.zeros(1)
    if rank == 2:  # dies once the others are past the warm-up (it only receives)
        for r in range(p):
            if r != 2:
                dist.recv(done, r)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.send(done, 2)
    start = time.time()
    try:
        dist.all_reduce(t)
        raise AssertionError("no error after rank 2 died")
    except RuntimeError as e:
        assert time.time() - start < 5, f"the failure took {time.time() - start:.1f} s"
        assert isinstance(e, DistBackendError), type(e)
    start = time.time()
    dist.shrink_group([2])
    took = time.time() - start
    survivors = [r for r in range(p) if r != 2]
    me = survivors.index(rank)
    assert dist.get_world_size() == p - 1 and dist.get_rank() == me, (dist.get_rank(), me)
    for i in range(3):
        t = torch.arange(1000, dtype=torch.float32) + 1000 * me + i
        dist.all_reduce(t)
        want = sum(torch.arange(1000, dtype=torch.float32) + 1000 * r + i
                   for r in range(p - 1))
        expect_equal(t, want, f"all_reduce {i} after the shrink")
        out = torch.zeros((p - 1) * 70000, dtype=torch.int64)
        dist.all_gather_into_tensor(out, torch.full((70000,), 10 * me + i, dtype=torch.int64))
        want = torch.cat([torch.full((70000,), 10 * r + i, dtype=torch.int64)
                          for r in range(p - 1)])
        expect_equal(out, want, f"all_gather_into_tensor {i} after the shrink")
    # A group of the survivors, shrunk again by the two that stay.
    g = dist.new_group(list(range(p - 1)), backend="rdmacoll")
    if dist.get_rank() < p - 2:
        pair = dist.shrink_group([p - 2], group=g)
        t = torch.full((10,), float(dist.get_rank(group=pair) + 1))
        dist.all_reduce(t, group=pair)
        expect_equal(t, torch.full((10,), float(sum(range(1, p - 1)))), "the shrunk pair")
    dist.destroy_process_group()
    print(f"ok shrink: rank {rank} shrank in {took * 1000:.1f} ms", flush=True)
    os._exit(0)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _loss_of(net, step, who):
    """Rank `who`'s loss at `step`: every rank can make any rank's batch of any step."""
    g = torch.Generator().manual_seed(1000 * step + who)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    return torch.nn.functional.mse_loss(net(x), y)


def _check_against_the_survivors_run(params, lr, steps, fail_at, p, survivors, what):
    """The run the recovery must equal, by hand and without communication: SGD on the mean loss
    of every rank up to `fail_at`, of the survivors from there. Returns the final loss."""
    ref = _mlp()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
    for s in range(steps):
        ref_opt.zero_grad()
        who = list(range(p)) if s < fail_at else survivors
        (sum(_loss_of(ref, s, w) for w in who) / len(who)).backward()
        ref_opt.step()
    for (name, a), b in zip(params, ref.parameters()):
        if not torch.allclose(a, b, atol=1e-5, rtol=0):
            raise AssertionError(f"{what}: {name} is {(a - b).abs().max().item()} away from the "
                                 f"{len(survivors)}-rank run")
    return sum(_loss_of(ref, steps, w) for w in survivors).item() / len(survivors)


def _train_through_a_kill(rank, p, lr, steps, fail_at, build, keep, restore,
                          error=RuntimeError):
    """SGD for `steps` steps on what `build()` makes over the default group: (the module the
    forward runs through, the model). Rank 2 is SIGKILLed in the middle of step `fail_at`,
    after its forward. The survivors catch the error (an `error`), shrink the default group
    without rank 2, build again over it, `restore` the state `keep` took after the last good
    step, and finish. Returns the model and the survivors (old world ranks)."""
    net, model = build()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    kept = keep(model)
    step, me, survivors = 0, rank, list(range(p))
    while step < steps:
        try:
            opt.zero_grad()
            loss = _loss_of(net, step, survivors[me])
            if step == fail_at and rank == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            opt.step()
            kept = keep(model)
            step += 1
        except RuntimeError as e:
            assert step == fail_at and survivors == list(range(p)), (step, str(e))
            assert isinstance(e, error), type(e)
            dist.shrink_group([2])
            survivors = [r for r in range(p) if r != 2]
            me = dist.get_rank()
            assert survivors[me] == rank and dist.get_world_size() == p - 1
            net, model = build()  # over the new default group
            restore(model, kept)
            opt = torch.optim.SGD(model.parameters(), lr=lr)
    return model, survivors


def case_ddp_shrink():
    """DDP recovery: 4 ranks train; rank 2 is SIGKILLed in the middle of step 5 (after its
    forward); the survivors' backward raises, they shrink the default group, restore the replica
    state they kept from the last good step, wrap the model in a new DDP over the shrunk group
    and finish the run. Their parameters then equal a 3-rank run from that step's state."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, p = init(timeout_s=20)
    lr, steps, fail_at = 0.05, 12, 5

    def replicated():
        model = _mlp()
        return DDP(model), model

    model, survivors = _train_through_a_kill(
        rank, p, lr, steps, fail_at, replicated, lambda m: copy.deepcopy(m.state_dict()),
        lambda m, kept: m.load_state_dict(kept), error=DistBackendError)
    final = _check_against_the_survivors_run(model.named_parameters(), lr, steps, fail_at, p,
                                             survivors, "DDP after the shrink")
    dist.destroy_process_group()
    print(f"ok ddp_shrink: rank {rank} finished {steps} steps on {len(survivors)} ranks, "
          f"loss {final:.5f} as the 3-rank run", flush=True)
    os._exit(0)


def case_fsdp2_shrink():
    """FSDP2 recovery: 4 ranks train with fully_shard; rank 2 is SIGKILLed in the middle of step
    4 (after its forward). The survivors catch the error, shrink the default group, shard a new
    model over a mesh of the shrunk group, load the whole state they kept after the last good
    step (every parameter gathered: the 4-rank shards cannot be loaded on 3 ranks as they are),
    and finish the run. Their parameters then equal a 3-rank run from that step's state."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                         set_model_state_dict)
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    rank, p = init(timeout_s=20)
    lr, steps, fail_at = 0.05, 8, 4

    def sharded():
        # The world numbers its ranks 0..n-1 both ways, also once shrunk (rdmacoll_torch
        # renumbers what torch maps; a DeviceMesh needs both to agree).
        assert dist.get_process_group_ranks(dist.group.WORLD) == list(range(dist.get_world_size()))
        m = _mlp()
        fully_shard(m, mesh=DeviceMesh.from_group(dist.group.WORLD, "cpu"))
        return m, m

    def whole(m):  # every parameter in full, gathered from the shards
        return {n: q.full_tensor().clone() for n, q in m.named_parameters()}

    def load(m, kept):
        set_model_state_dict(m, kept, options=StateDictOptions(full_state_dict=True))

    model, survivors = _train_through_a_kill(rank, p, lr, steps, fail_at, sharded, whole, load)
    final = _check_against_the_survivors_run(whole(model).items(), lr, steps, fail_at, p,
                                             survivors, "FSDP2 after the shrink")
    dist.destroy_process_group()
    print(f"ok fsdp2_shrink: rank {rank} finished {steps} steps on {len(survivors)} ranks, "
          f"loss {final:.5f} as the 3-rank run", flush=True)
    os._exit(0)


def case_p2p_killed():
    """A sender killed mid-message: the receiver's recv raises naming the process that exited,
    and destroy_process_group returns at once on every survivor (it once took twice the
    timeout: 10 s at 5 s)."""
    rank, p = init(timeout_s=5)
    n = 16 << 20  # 64 MiB: written after a clear-to-send
    if rank == p - 1:
        dist.isend(torch.zeros(n), 0)
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        try:
            dist.recv(torch.zeros(n), p - 1)
            raise AssertionError("no error from a killed sender")
        except RuntimeError as e:
            assert f"of rank {p - 1} on this host" in str(e), str(e)
    start = time.time()
    dist.destroy_process_group()
    took = time.time() - start
    assert took < 3, f"destroy_process_group took {took:.1f} s"
    print(f"ok p2p_killed: rank {rank} destroyed in {took:.2f} s", flush=True)


def case_reinit():
    """destroy_process_group, then a fresh init_process_group in the same processes. Each
    round rendezvouses on a port of its own: torch 1.13's TCPStore server on rank 0 outlives
    its group for a moment, and a rank that reconnects to the same port in that moment is
    reset (gloo does the same)."""
    base = int(os.environ["MASTER_PORT"])
    for round_ in range(3):
        os.environ["MASTER_PORT"] = str(base + 1 + round_)
        rank, p = init()
        t = torch.full((10,), float(rank + round_))
        dist.all_reduce(t)
        expect_equal(t, torch.full((10,), float(sum(r + round_ for r in range(p)))),
                     f"round {round_}")
        dist.destroy_process_group()
        assert not rdmacoll_torch._C.is_initialized()


def case_late():
    """Ranks arrive seconds apart, as under a real launcher: the early ranks' store waits
    outlast many of the library's 250 ms abort-check slices. torch 1.13's TCPStore leaves a
    timed-out wait pending on its server, whose late answer then desynchronizes the
    connection ("Stop_waiting response is expected"); the backend must never time a wait out
    on torch's store."""
    rank = int(os.environ["RANK"])
    time.sleep(0.8 * rank)  # the skew under test, not a wait for anything
    rank, p = init()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    expect_equal(t, torch.full((4,), float(p * (p + 1) // 2)), "all_reduce after a late join")
    time.sleep(0.8 * (p - 1 - rank))  # skew again, now at new_group
    sub = dist.new_group(list(range(p)))
    out = torch.empty(p, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.tensor([rank * 7]), group=sub)
    expect_equal(out, torch.tensor([r * 7 for r in range(p)]), "all_gather on a late group")
    dist.barrier()
    dist.destroy_process_group()


def case_threads():
    """A second Python thread runs collectives on another group while the main thread runs
    its own."""
    rank, p = init()
    other = dist.new_group(list(range(p)))
    errors = []

    def side():
        try:
            for i in range(100):
                t = torch.full((2000,), float(rank * i))
                dist.all_reduce(t, group=other)
                expect_equal(t, torch.full((2000,), float(sum(r * i for r in range(p)))),
                             f"thread all_reduce {i}")
        except Exception as e:  # reported by the main thread
            errors.append(e)

    th = threading.Thread(target=side)
    th.start()
    for i in range(100):
        out = torch.zeros(p * 500)
        dist.all_gather_into_tensor(out, torch.full((500,), float(rank + i)))
        expect_equal(out, torch.cat([torch.full((500,), float(r + i)) for r in range(p)]),
                     f"main all_gather {i}")
    th.join()
    if errors:
        raise errors[0]
    dist.barrier()
    dist.destroy_process_group()


def case_exit():
    """The last rank leaves after 3 calls: by an uncaught exception, by Ctrl-C (SIGINT) or by
    ending without destroy_process_group (argv[2]), with torch's default 30-minute timeout. The
    others are in their next all_reduce: they must raise a communication error within about a
    second, not at the timeout."""
    how = sys.argv[2]
    dist.init_process_group(backend="rdmacoll")
    rank, p = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == p - 1:
        print(f"leaving at {time.time():.3f}", flush=True)
        if how == "exception":
            raise RuntimeError("the user's code failed")
        if how == "sigint":
            # A shell's background job starts with SIGINT ignored; a terminal's Ctrl-C would not.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)  # the KeyboardInterrupt arrives here
        sys.exit(0)  # "nodestroy"
    start = time.time()
    try:
        for _ in range(100000):
            dist.all_reduce(t)
        raise AssertionError("no error after a peer left")
    except RuntimeError as e:
        took = time.time() - start
        assert isinstance(e, DistBackendError), type(e)
        print(f"ok exit: rank {rank} raised at {time.time():.3f} after {took:.2f} s: "
              f"{str(e)[:160]}", flush=True)
    os._exit(0)


def case_uaf():
    """A caller that keeps only the future (torch's quantization hook does) and drops the work
    and the input: the input must live until the collective has read it. Each call waits behind
    a large one, so it has not started when its input goes; the freed memory is then reused."""
    rank, p = init()
    n = 1 << 18
    for it in range(5):
        big = torch.ones(1 << 21)
        w0 = dist.all_reduce(big, async_op=True)
        out = torch.zeros(p * n)
        fut = dist.all_gather_into_tensor(out, torch.full((n,), float(rank + it)),
                                          async_op=True).get_future()
        out2 = torch.zeros(n)
        ins = [torch.full((n,), float(rank * 10 + r + it)) for r in range(p)]
        fut2 = dist.reduce_scatter(out2, ins, async_op=True).get_future()  # stacked temporary
        del ins
        junk = [torch.full((n,), -7.0) for _ in range(16)]  # reuses what was freed
        fut.wait()
        fut2.wait()
        w0.wait()
        del junk
        expect_equal(out, torch.cat([torch.full((n,), float(r + it)) for r in range(p)]),
                     f"all_gather after the input was dropped, round {it}")
        expect_equal(out2, torch.full((n,), float(sum(r * 10 + rank + it for r in range(p)))),
                     f"reduce_scatter after the inputs were dropped, round {it}")
    dist.barrier()
    dist.destroy_process_group()


def _mistakes(p):
    """(what, the offending rank's call, the others' call of the same collective): mistakes only
    the offending rank can see."""
    cases = [
        ("a list of the wrong length",
         lambda: dist.all_gather([torch.zeros(4) for _ in range(p + 1)], torch.zeros(4),
                                 async_op=True),
         lambda: dist.all_gather([torch.zeros(4) for _ in range(p)], torch.zeros(4),
                                 async_op=True)),
        ("MAX of complex tensors",
         lambda: dist.reduce_scatter_tensor(torch.zeros(2, dtype=torch.complex64),
                                            torch.zeros(2 * p, dtype=torch.complex64),
                                            op=dist.ReduceOp.MAX, async_op=True),
         lambda: dist.reduce_scatter_tensor(torch.zeros(2, dtype=torch.complex64),
                                            torch.zeros(2 * p, dtype=torch.complex64),
                                            async_op=True)),
        ("a reduce_scatter list of the wrong length",
         lambda: dist.reduce_scatter(torch.zeros(4), [torch.zeros(4)] * (p + 1), async_op=True),
         lambda: dist.reduce_scatter(torch.zeros(4), [torch.zeros(4)] * p, async_op=True)),
    ]
    if not TORCH2:  # torch 2.x refuses it in its dispatcher, before any backend sees it
        cases.append(("a sparse tensor in broadcast",
                      lambda: dist.broadcast(torch.zeros(4).to_sparse(), 0, async_op=True),
                      lambda: dist.broadcast(torch.zeros(4), 0, async_op=True)))
    if TORCH2:
        cases.append(("a large all_reduce of float8 among float32 ones",
                      lambda: dist.all_reduce(torch.zeros(1 << 20, dtype=torch.float8_e4m3fn),
                                              async_op=True),
                      lambda: dist.all_reduce(torch.zeros(1 << 20), async_op=True)))
    return cases


def case_mistakes():
    """One rank's mistake (that only it can see) raises at its call, and at every other rank's
    wait within a second, with the offender's words; the group stays in step: each mistake is
    caught and the next 100 all_reduce results are checked on every rank."""
    rank, p = init(timeout_s=60)
    bad = p - 1
    for what, bad_call, good_call in _mistakes(p):
        start = time.time()
        if rank == bad:
            try:
                bad_call()
            except (RuntimeError, ValueError) as e:
                assert "rdmacoll" in str(e), str(e)
            else:
                raise AssertionError(f"{what}: no error at the offending rank's call")
        else:
            work = good_call()
            try:
                work.wait()
            except RuntimeError as e:
                took = time.time() - start
                assert f"rank {bad} rejected its arguments" in str(e), (what, str(e))
                assert took < 1.5, f"{what}: raised after {took:.2f} s"
            else:
                raise AssertionError(f"{what}: no error on rank {rank}")
        for i in range(100):
            t = torch.full((7,), float(rank + i))
            dist.all_reduce(t)
            expect_equal(t, torch.full((7,), float(sum(r + i for r in range(p)))),
                         f"all_reduce {i} after {what}")
    dist.barrier()
    dist.destroy_process_group()


def case_secondary():
    """rdmacoll groups under a gloo default group: one of all ranks, and two that overlap."""
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=120))
    rank, p = dist.get_rank(), dist.get_world_size()
    assert p >= 3
    whole = dist.new_group(backend="rdmacoll")
    g01 = dist.new_group([0, 1], backend="rdmacoll")
    g12 = dist.new_group([1, 2], backend="rdmacoll")
    assert dist.get_backend(whole) == "rdmacoll"
    for i in range(3):
        t = torch.full((1000,), float(rank + i))
        dist.all_reduce(t, group=whole)
        expect_equal(t, torch.full((1000,), float(sum(r + i for r in range(p)))), "whole")
        for ranks, g in (((0, 1), g01), ((1, 2), g12)):
            if rank in ranks:
                out = torch.zeros(2 * 3, dtype=torch.int64)
                dist.all_gather_into_tensor(out, torch.full((3,), rank + i), group=g)
                expect_equal(out, torch.tensor([r + i for r in ranks for _ in range(3)]),
                             f"group {ranks}")
        t = torch.full((5,), float(rank))
        dist.all_reduce(t)  # gloo, the default group
        expect_equal(t, torch.full((5,), float(sum(range(p)))), "gloo default group")
    dist.barrier()
    dist.destroy_process_group()


def case_teardown():
    """Destroying a subgroup (and then the world) while an async op on it still runs, with a
    Python callback chained on it: neither waits for the other forever (the GIL)."""
    rank, p = init(timeout_s=60)
    for i in range(3):
        sub = dist.new_group(list(range(p)))
        seen = []
        t = torch.full((1 << 20,), float(rank))
        fut = dist.all_reduce(t, group=sub, async_op=True).get_future().then(
            lambda f: seen.append(f.value()[0][0].item()))
        dist.destroy_process_group(sub)
        fut.wait()
        assert seen == [float(sum(range(p)))], seen
    t = torch.ones(1 << 20)
    last = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value())
    dist.destroy_process_group()
    last.wait()
    expect_equal(t, torch.full((1 << 20,), float(p)), "the world's last async op")
