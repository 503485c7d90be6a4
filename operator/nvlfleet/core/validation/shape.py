"""The shape of a serving: the CRD's CEL rules repeated offline, and groups made of whole nodes in one NVLink domain.

Pure core, inside the validate step (parse → **shape and topology** → the rest of the checks): ``check_topology``
says False when a role's layout is too broken for the effective settings to be worked out.
"""

from __future__ import annotations

from nvlfleet.api import models, problems
from nvlfleet.core.validation import findings
from nvlfleet.facts import hardware

# ---------------------------------------------------------------------------------------------------------------
# What the CRD's CEL rules say, repeated for offline validation (same conditions, same words)


def check_shape_rules(spec: models.DeepSeekServingSpec, out: findings.Findings) -> None:
    weights = spec.model.weights
    if weights.cache == "pvc" and weights.pvc is None:
        out.error("spec.model.weights.pvc", "cache 'pvc' needs weights.pvc.claimName")
    if weights.cache == "hostPath" and weights.host_path is None:
        out.error("spec.model.weights.hostPath", "cache 'hostPath' needs weights.hostPath.path")
    if weights.cache != "pvc" and weights.pvc is not None:
        out.warn("spec.model.weights.pvc", f"is ignored because cache is {weights.cache!r}; set cache: pvc to use it")
    if weights.cache != "hostPath" and weights.host_path is not None:
        out.warn(
            "spec.model.weights.hostPath",
            f"is ignored because cache is {weights.cache!r}; set cache: hostPath to use it",
        )
    graph = spec.kernels.cuda_graph
    if graph is not None and graph.min_batch > graph.max_batch:
        out.error(
            "spec.kernels.cudaGraph.minBatch",
            f"minBatch {graph.min_batch} must not exceed maxBatch {graph.max_batch}",
        )
    for i, env in enumerate(spec.extra_env):
        if (env.value is None) == (env.value_from is None):
            out.error(problems.path("spec.extraEnv", i), f"{env.name}: set exactly one of value and valueFrom")


# ---------------------------------------------------------------------------------------------------------------
# Topology: groups made of whole nodes, inside one NVLink domain


def check_topology(
    spec: models.DeepSeekServingSpec, role: models.RoleName, role_spec: models.RoleSpec, out: findings.Findings
) -> bool:
    """Report layouts that cannot be placed; False when the layout is too broken to reason about further."""
    gen = hardware.generation(spec.gpu.value)
    par = role_spec.parallelism
    base = f"spec.roles.{role.value}.parallelism"
    gpn = gen.gpus_per_node
    if par.tensor > gpn:
        out.error(
            f"{base}.tensor",
            f"{role.value}: tensor-parallel size {par.tensor} is larger than the {gpn} GPUs of one {gen.name} node; "
            f"use data parallelism across nodes (e.g. tensor: 1, data: {par.tensor * (par.data or 1)}) "
            "with expert parallelism instead",
        )
        return False
    if gpn % par.tensor:
        fits = findings.either([str(t) for t in range(1, gpn + 1) if gpn % t == 0])
        out.error(
            f"{base}.tensor",
            f"{role.value}: tensor-parallel size {par.tensor} does not divide the {gpn} GPUs of a {gen.name} node, "
            f"so {gpn % par.tensor} GPU(s) of every node would sit idle; use tensor {fits}",
        )
        return False
    ok = True
    if par.data is not None and par.nodes_per_group is not None:
        want = par.nodes_per_group * gpn // par.tensor
        if par.data != want:
            out.error(
                f"{base}.data",
                f"{role.value}: data-parallel size {par.data} does not match nodesPerGroup {par.nodes_per_group}: "
                f"{par.nodes_per_group} {gen.name} nodes hold {par.nodes_per_group * gpn} GPUs, i.e. data {want} "
                f"at tensor {par.tensor}; set data: {want} or leave data unset",
            )
            ok = False
    elif par.data is not None and (par.tensor * par.data) % gpn:
        gpus = par.tensor * par.data
        per_node = gpn // par.tensor
        lower, upper = (gpus // gpn) * per_node, (gpus // gpn + 1) * per_node
        choices = f"data: {lower} or {upper}" if lower else f"data: {upper}"
        out.error(
            f"{base}.data",
            f"{role.value}: tensor × data = {par.tensor} × {par.data} = {gpus} GPUs does not fill whole "
            f"{gpn}-GPU {gen.name} nodes (each node runs one vLLM pod on all its GPUs); use {choices}",
        )
        ok = False
    topology = models.role_topology(spec.gpu, role_spec)
    if topology.nodes_per_group > gen.nodes_per_domain:
        where = f"{base}.nodesPerGroup" if par.nodes_per_group is not None else f"{base}.data"
        if gen.multi_node_nvlink:
            out.error(
                where,
                f"{role.value}: a group of {topology.nodes_per_group} nodes ({topology.nodes_per_group * gpn} GPUs) "
                f"does not fit in one {gen.name} NVLink domain of {gen.nodes_per_domain} nodes "
                f"({gen.gpus_per_domain} GPUs); a group never spans domains, so use smaller groups "
                f"(at most data: {gen.gpus_per_domain // par.tensor} at tensor {par.tensor}) and more of them",
            )
        else:
            out.error(
                where,
                f"{role.value}: a group spanning {topology.nodes_per_group} {gen.name} nodes is refused: NVLink "
                f"stops at the node on {gen.name}, so tensor × data must fit the {gpn} GPUs of one node; "
                "run more groups instead",
            )
        ok = False
    return ok


def check_role_limits(
    spec: models.DeepSeekServingSpec, role: models.RoleName, role_spec: models.RoleSpec, out: findings.Findings
) -> None:
    base = f"spec.roles.{role.value}"
    seqs, tokens = role_spec.max_num_seqs, role_spec.max_num_batched_tokens
    if seqs is not None and tokens is not None and tokens < seqs:
        out.error(
            f"{base}.maxNumBatchedTokens",
            f"{role.value}: maxNumBatchedTokens {tokens} is smaller than maxNumSeqs {seqs}; a scheduler step "
            "must fit at least one token per running request",
        )
    graph = spec.kernels.cuda_graph
    if seqs is not None and graph is not None and "min_batch" in graph.model_fields_set and seqs < graph.min_batch:
        out.error(
            "spec.kernels.cudaGraph.minBatch",
            f"{role.value}: the CUDA-graph window starts at {graph.min_batch} requests, but maxNumSeqs is {seqs}: "
            f"a rank never runs {graph.min_batch} requests at once; lower minBatch or raise maxNumSeqs",
        )
