"""Every collective each simulated rank issued, compared across ranks after all have run.

NCCL matches collectives by order: the k-th call on a group must be the same op with the same
shapes and dtypes on every member, and the k-th send from a to b must fit the k-th receive at b
from a. A rank that takes another branch (a cache decision that differs per rank, a padded
shard sized differently) hangs or corrupts a real job; here it is a sentence in `mismatches()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Call:
    op: str
    group: tuple[int, ...]  # global ranks of the group
    tensors: tuple[tuple, ...]  # (shape, dtype, device) per tensor argument, inputs first
    peer: int | None = None  # p2p: the other rank; broadcast: the source
    values: tuple | None = None  # host values the (first) tensor carried: shape headers, a cache's sums
    received: tuple | None = None  # all_gather of valued tensors: the values taken for each member

    @property
    def signature(self) -> tuple:
        """What every member must agree on: op and the (shape, dtype) of the first tensor."""
        return (self.op, self.tensors[0][:2] if self.tensors else None, self.peer)


@dataclass
class Ledger:
    calls: dict[int, list[Call]] = field(default_factory=dict)
    objects: list = field(default_factory=list)  # rank 0's broadcast_object_list payloads, in order
    early: set = field(default_factory=set)  # ranks that received from a peer that had not run yet

    def start_rank(self, rank: int) -> None:
        self.calls[rank] = []
        self.early.discard(rank)
        if rank == 0:
            self.objects = []

    def valued_gathers(self, rank: int, group: tuple) -> list[Call]:
        """`rank`'s all_gathers on `group` of tensors that carried host values, in order."""
        return [
            c for c in self.calls.get(rank, []) if c.op == "all_gather" and c.group == group and c.values is not None
        ]

    def gathered(self, rank: int, group: tuple, values, foresee=None) -> list:
        """What `rank`'s next valued all_gather on `group` receives from each member, given
        that it sends `values`: the values of the member's all_gather at the same position
        among its valued ones as the member's last run sent them; for a member that has not
        run yet, `foresee(member)` (what the test knows it will send: First-Block Cache's
        planted sums), else the values this rank sends (ranks that agree by design: a step
        cache's host-made schedule logged on each dp rank). `stale_gathers` finds the parts
        that differ from what the members then send: a wrong forecast costs a rerun of this
        rank (simulate), never a wrong verdict."""
        k = len(self.valued_gathers(rank, group))
        out = []
        for member in group:
            theirs = self.valued_gathers(member, group)
            if member == rank:
                out.append(values)
            elif k < len(theirs):
                out.append(theirs[k].values)
            else:
                guess = None if foresee is None else foresee(member)
                out.append(values if guess is None else guess)
        return out

    def stale_gathers(self) -> list[tuple]:
        """(rank, group, k, member, received, sent) for each part of a valued all_gather that
        is not what its member sent at that position (sent before the member ran, or the
        member's values changed since): simulate runs such a rank again."""
        out = []
        for rank, calls in self.calls.items():
            for group in {c.group for c in calls}:
                for k, call in enumerate(self.valued_gathers(rank, group)):
                    for member, got in zip(group, call.received or ()):
                        theirs = self.valued_gathers(member, group)
                        sent = theirs[k].values if k < len(theirs) else None
                        if got != sent:
                            out.append((rank, group, k, member, got, sent))
        return out

    def sent(self, src: int, dst: int) -> list[Call]:
        return [c for c in self.calls.get(src, []) if c.op == "send" and c.peer == dst]

    def devices(self) -> dict[int, set[str]]:
        """The devices each rank's collectives used."""
        return {r: {t[2] for c in calls for t in c.tensors} for r, calls in self.calls.items()}

    def mismatches(self) -> list[str]:
        """Disagreements between ranks, as sentences (empty: consistent)."""
        problems = []
        per_group: dict[tuple, dict[int, list[Call]]] = {}
        for rank, calls in self.calls.items():
            for call in calls:
                if call.op not in ("send", "recv"):
                    per_group.setdefault(call.group, {}).setdefault(rank, []).append(call)
        for group, by_rank in sorted(per_group.items()):
            members = [r for r in group if r in self.calls]
            sequences = [by_rank.get(r, []) for r in members]
            if len({len(s) for s in sequences}) > 1:
                problems.append(f"group {group}: call counts differ per rank {dict(zip(members, map(len, sequences)))}")
            for k, calls in enumerate(zip(*sequences)):
                if len({c.signature for c in calls}) > 1:
                    seen = {r: c.signature for r, c in zip(members, calls)}
                    problems.append(f"group {group} call #{k}: ranks disagree {seen}")
        problems += [
            f"group {group} valued all_gather #{k}: rank {rank} took {got} from rank {member}, which sent {sent}"
            for rank, group, k, member, got, sent in self.stale_gathers()
        ]
        pairs = {(r, c.peer) for r, calls in self.calls.items() for c in calls if c.op == "send"}
        pairs |= {(c.peer, r) for r, calls in self.calls.items() for c in calls if c.op == "recv"}
        for a, b in sorted(pairs):
            if a not in self.calls or b not in self.calls:
                continue
            sends = self.sent(a, b)
            recvs = [c for c in self.calls[b] if c.op == "recv" and c.peer == a]
            if len(sends) != len(recvs):
                problems.append(f"p2p {a}→{b}: {len(sends)} sends, {len(recvs)} receives")
            for k, (s, r) in enumerate(zip(sends, recvs)):
                if s.tensors[0][:2] != r.tensors[0][:2]:
                    problems.append(f"p2p {a}→{b} #{k}: sent {s.tensors[0][:2]}, received into {r.tensors[0][:2]}")
        return problems
