"""`--local_rank` / `--local-rank` options go; LOCAL_RANK from the environment replaces them.

torchrun passes the local rank in the environment only (and old launchers passed it as a
hyphenated option that `--local_rank` does not accept).
"""

from __future__ import annotations

import libcst as cst

from ddpify.convert.transforms.base import Transform
from ddpify.syntax import code, method_call, string_value

OPTIONS = {"--local_rank", "--local-rank"}


class LocalRankArgument(Transform):
    name = "local-rank"
    DESCRIPTION = "--local_rank argparse options replaced by the LOCAL_RANK environment variable"

    def run(self) -> None:
        options = [c for c in self.tree.calls() if self._is_option(c)]
        for call in options:
            statement = self.tree.statement(call)
            self.plan.remove(statement)
            self.change(statement, "--local_rank option removed: torchrun sets LOCAL_RANK in the environment")
        if not options:
            return
        for node in self.tree.walk():
            if isinstance(node, cst.Attribute) and node.attr.value == "local_rank" and isinstance(node.value, cst.Name):
                self._replace_read(node)

    def _is_option(self, call: cst.Call) -> bool:
        found = method_call(call)
        return (
            found is not None
            and found[1] == "add_argument"
            and any(string_value(a.value) in OPTIONS for a in call.args if a.keyword is None)
        )

    def _replace_read(self, node: cst.Attribute) -> None:
        function = self.tree.function(node)
        parent = self.tree.parent(node)
        if self.facts.sees_entry_names(function):
            if isinstance(parent, cst.Assign) and all(code(t.target) == "local_rank" for t in parent.targets):
                self.plan.remove(self.tree.statement(node))  # `local_rank = args.local_rank`
            else:
                self.plan.replace(node, cst.Name("local_rank"))
        else:
            self.plan.replace(node, cst.parse_expression('int(os.environ.get("LOCAL_RANK", 0))'))
        self.change(node, "the local rank comes from LOCAL_RANK now")
