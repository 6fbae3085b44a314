"""The table every bench prints: lake beside its peer, the ratio and the goal."""


class Report:
    def __init__(self):
        self.rows = []

    def add(self, measure, lake, peer, unit, goal, higher_is_better=False, limit=None):
        """A measure beside its peer. `goal` is a ratio bound (lake/peer) unless `limit` is an
        absolute bound on lake's own number."""
        ratio = lake / peer if peer else float("nan")
        if goal is None and limit is None:
            met = None
        elif limit is not None:
            met = lake < limit
        elif higher_is_better:
            met = ratio >= goal
        else:
            met = ratio <= goal
        self.rows.append((measure, lake, peer, unit, ratio, goal, limit, higher_is_better, met))

    def print(self):
        print(f"{'measure':<52} {'lake':>9} {'peer':>9} {'unit':<6} {'lake/peer':>9}  {'goal':<10} met")
        for measure, lake, peer, unit, ratio, goal, limit, higher, met in self.rows:
            peer_s = f"{peer:>9.2f}" if peer is not None else f"{'-':>9}"
            ratio_s = f"{ratio:>9.2f}" if peer is not None else f"{'-':>9}"
            if goal is None and limit is None:
                goal_s = "-"
            elif limit is not None:
                goal_s = f"< {limit:g}"
            else:
                goal_s = f">= {goal:g}x" if higher else f"<= {goal:g}x"
            met_s = "-" if met is None else ("yes" if met else "NO")
            print(f"{measure:<52} {lake:>9.2f} {peer_s} {unit:<6} {ratio_s}  {goal_s:<10} {met_s}")
