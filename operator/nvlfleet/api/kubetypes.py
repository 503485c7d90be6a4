"""The Kubernetes types a DeepSeekServing embeds, as closed typed subsets: tolerations, volumes, volume mounts,
environment variables and their sources, and the part of object metadata nvlfleet reads.

Pure API, part of the spec that enters the data flow (spec → validate → plan → **render**): render copies these
into the pod templates with ``to_wire()``. Each is the subset of the Kubernetes type nvlfleet supports, with no
field left open (no ``x-kubernetes-preserve-unknown-fields``): an unknown field is refused at admission, never
passed to a pod unchecked. ``nvlfleet.core.validation`` and ``nvlfleet.core.inventory`` check their values.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic

from nvlfleet.api import schema

ABSOLUTE_PATH = r"^/"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Toleration(schema.Model):
    """A Kubernetes Toleration (the fields the scheduler reads; ``nvlfleet.inventory`` checks their values)."""

    key: Annotated[
        str | None, pydantic.Field(description="Taint key; empty with Exists: every taint.", max_length=316)
    ] = None
    operator: Annotated[str | None, pydantic.Field(description="Equal (default) or Exists.", max_length=16)] = None
    value: Annotated[str | None, pydantic.Field(description="Taint value (with Equal).", max_length=63)] = None
    effect: Annotated[
        str | None, pydantic.Field(description="NoSchedule, PreferNoSchedule or NoExecute; empty: all.", max_length=32)
    ] = None
    toleration_seconds: Annotated[
        int | None, pydantic.Field(description="How long a NoExecute taint is tolerated.", ge=0)
    ] = None


class KeyToPath(schema.Model):
    """A key of a ConfigMap or Secret projected to a file."""

    key: Annotated[str, pydantic.Field(description="The key.", min_length=1, max_length=253)]
    path: Annotated[
        str, pydantic.Field(description="Relative file path.", min_length=1, max_length=4096, pattern=r"^[^/]")
    ]
    mode: Annotated[int | None, pydantic.Field(description="File mode bits (0-0777).", ge=0, le=0o777)] = None


class PvcVolumeSource(schema.Model):
    """A PersistentVolumeClaim in the serving's namespace."""

    claim_name: Annotated[str, pydantic.Field(description="The claim's name.", min_length=1, max_length=253)]
    read_only: Annotated[bool | None, pydantic.Field(description="Mount read-only.")] = None


class ConfigMapVolumeSource(schema.Model):
    """A ConfigMap's keys as files."""

    name: Annotated[str, pydantic.Field(description="The ConfigMap.", min_length=1, max_length=253)]
    items: Annotated[list[KeyToPath] | None, pydantic.Field(description="Keys to project.", max_length=64)] = None
    default_mode: Annotated[int | None, pydantic.Field(description="File mode bits.", ge=0, le=0o777)] = None
    optional: Annotated[bool | None, pydantic.Field(description="Whether the ConfigMap may be missing.")] = None


class SecretVolumeSource(schema.Model):
    """A Secret's keys as files."""

    secret_name: Annotated[str, pydantic.Field(description="The Secret.", min_length=1, max_length=253)]
    items: Annotated[list[KeyToPath] | None, pydantic.Field(description="Keys to project.", max_length=64)] = None
    default_mode: Annotated[int | None, pydantic.Field(description="File mode bits.", ge=0, le=0o777)] = None
    optional: Annotated[bool | None, pydantic.Field(description="Whether the Secret may be missing.")] = None


class EmptyDirVolumeSource(schema.Model):
    """A scratch directory that lives as long as the pod."""

    medium: Annotated[Literal["", "Memory"] | None, pydantic.Field(description='"" (node disk) or Memory.')] = None
    size_limit: Annotated[
        str | int | None, pydantic.Field(description="Most it may hold, a Kubernetes quantity such as 64Gi.")
    ] = None


class HostPathVolumeSource(schema.Model):
    """A directory of the node (allowed only under the prefixes the cluster admin's policy names)."""

    path: Annotated[
        str, pydantic.Field(description="Absolute path on the node.", max_length=4096, pattern=ABSOLUTE_PATH)
    ]
    type: Annotated[
        Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"]
        | None,
        pydantic.Field(description="What must be at the path."),
    ] = None


class Volume(schema.Model):
    """An extra pod volume: a typed subset of the Kubernetes Volume (one source each)."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            (
                " + ".join(
                    f"(has(self.{source}) ? 1 : 0)"
                    for source in ("persistentVolumeClaim", "configMap", "secret", "emptyDir", "hostPath")
                )
                + " == 1",
                "set exactly one of persistentVolumeClaim, configMap, secret, emptyDir and hostPath",
            ),
        )
    )

    name: Annotated[str, pydantic.Field(description="Volume name.", pattern=schema.DNS_LABEL, max_length=63)]
    persistent_volume_claim: Annotated[PvcVolumeSource | None, pydantic.Field(description="A claim.")] = None
    config_map: Annotated[ConfigMapVolumeSource | None, pydantic.Field(description="A ConfigMap.")] = None
    secret: Annotated[SecretVolumeSource | None, pydantic.Field(description="A Secret.")] = None
    empty_dir: Annotated[EmptyDirVolumeSource | None, pydantic.Field(description="A scratch directory.")] = None
    host_path: Annotated[HostPathVolumeSource | None, pydantic.Field(description="A directory of the node.")] = None


class VolumeMount(schema.Model):
    """Where an extra volume appears in the vLLM container."""

    name: Annotated[str, pydantic.Field(description="The volume's name.", pattern=schema.DNS_LABEL, max_length=63)]
    mount_path: Annotated[
        str, pydantic.Field(description="Absolute path in the container.", max_length=4096, pattern=ABSOLUTE_PATH)
    ]
    read_only: Annotated[bool | None, pydantic.Field(description="Mount read-only.")] = None
    sub_path: Annotated[str | None, pydantic.Field(description="A path inside the volume.", max_length=4096)] = None
    mount_propagation: Annotated[
        Literal["None", "HostToContainer"] | None,
        pydantic.Field(description="None or HostToContainer (Bidirectional needs a privileged container)."),
    ] = None


class KeyRef(schema.Model):
    """A key of a Secret or ConfigMap in the serving's namespace."""

    name: Annotated[str, pydantic.Field(description="The object's name.", min_length=1, max_length=253)]
    key: Annotated[str, pydantic.Field(description="The key.", min_length=1, max_length=253)]
    optional: Annotated[bool | None, pydantic.Field(description="Whether it may be missing.")] = None


class FieldRef(schema.Model):
    """A field of the pod (downward API)."""

    field_path: Annotated[str, pydantic.Field(description="e.g. status.podIP.", min_length=1, max_length=253)]
    api_version: Annotated[str | None, pydantic.Field(description="Defaults to v1.", max_length=64)] = None


class ResourceFieldRef(schema.Model):
    """A resource request or limit of the container (downward API)."""

    resource: Annotated[str, pydantic.Field(description="e.g. limits.memory.", min_length=1, max_length=253)]
    container_name: Annotated[str | None, pydantic.Field(description="Container.", max_length=63)] = None
    divisor: Annotated[str | int | None, pydantic.Field(description="Unit, a Kubernetes quantity.")] = None


class EnvVarSource(schema.Model):
    """Where an env var's value comes from: one of a Secret key, a ConfigMap key, a pod field, a resource."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            (
                " + ".join(
                    f"(has(self.{source}) ? 1 : 0)"
                    for source in ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")
                )
                + " == 1",
                "set exactly one of secretKeyRef, configMapKeyRef, fieldRef and resourceFieldRef",
            ),
        )
    )

    secret_key_ref: Annotated[KeyRef | None, pydantic.Field(description="A Secret's key.")] = None
    config_map_key_ref: Annotated[KeyRef | None, pydantic.Field(description="A ConfigMap's key.")] = None
    field_ref: Annotated[FieldRef | None, pydantic.Field(description="A pod field.")] = None
    resource_field_ref: Annotated[ResourceFieldRef | None, pydantic.Field(description="A container resource.")] = None


class EnvVar(schema.Model):
    """An extra environment variable: a literal value or a reference (e.g. secretKeyRef)."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=schema.cel(
            ("has(self.value) != has(self.valueFrom)", "set exactly one of value and valueFrom"),
        )
    )

    name: Annotated[str, pydantic.Field(description="Variable name.", pattern=_ENV_NAME, max_length=256)]
    value: Annotated[str | None, pydantic.Field(description="Literal value.", max_length=4096)] = None
    value_from: Annotated[
        EnvVarSource | None, pydantic.Field(description="A Kubernetes EnvVarSource (secretKeyRef, ...).")
    ] = None


class ObjectMeta(pydantic.BaseModel):
    """The part of metadata nvlfleet reads; everything else passes through untouched."""

    model_config = pydantic.ConfigDict(extra="allow")

    name: str = ""
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    annotations: dict[str, str] = pydantic.Field(default_factory=dict)
