# The sluice image: a stripped binary on Debian 12 slim, for linux/amd64 and linux/arm64.
#   docker build -t sluice:0.1.0 .     (the tag deploy/ and charts/sluice pin: the workspace version)
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/sluice:0.1.0 --push .
#
# Needs BuildKit (the default builder since Docker 23): see the COPY below. Base images are
# pinned to exact versions (crates/sluice/tests/deploy_manifests.rs checks that no tag floats);
# bump them on purpose, with the rust-version of Cargo.toml in mind.
#
# The build stage runs on the builder's own platform and cross-compiles to the target's
# (TARGETARCH), with Debian's cross gcc for the C parts (ring, mimalloc): no emulation.
FROM --platform=$BUILDPLATFORM rust:1.95.0-bookworm AS build
ARG TARGETARCH
RUN set -eu; \
    case "$TARGETARCH" in \
      amd64) triple=x86_64-unknown-linux-gnu; gcc=x86_64-linux-gnu; cross="gcc-x86-64-linux-gnu libc6-dev-amd64-cross" ;; \
      arm64) triple=aarch64-unknown-linux-gnu; gcc=aarch64-linux-gnu; cross="gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;; \
      *) echo "unsupported TARGETARCH '$TARGETARCH': amd64 or arm64" >&2; exit 1 ;; \
    esac; \
    if [ "$(dpkg --print-architecture)" = "$TARGETARCH" ]; then cross=""; fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends libcap2-bin $cross; \
    rm -rf /var/lib/apt/lists/*; \
    rustup target add "$triple"; \
    echo "$triple" >/target-triple; echo "$gcc" >/target-gcc
WORKDIR /src
COPY . .
# Stripped (about 25 MB instead of 124 MB with the release profile's line tables); the
# workspace's release profile keeps its symbols for profiling.
ENV CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
# The file capability lets the non-root process bind ports 80 and 443. The DaemonSet runs
# as uid 65532 with `capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}` and
# `allowPrivilegeEscalation: false` (no_new_privs): the runtime puts NET_BIND_SERVICE in
# the bounding, permitted and effective sets before exec, but a non-root process loses its
# permitted set across execve unless the executed file carries the capability itself. With
# no_new_privs the file capability grants nothing beyond what the runtime already allowed,
# so this adds no privilege; without it the pod fails with "Permission denied" on :80.
# (ingress-nginx's image does the same.) crates/sluice/tests/unprivileged_bind.rs runs the
# binary exactly this way.
RUN set -eu; \
    triple=$(cat /target-triple); gcc=$(cat /target-gcc); \
    env_triple=$(echo "$triple" | tr 'a-z-' 'A-Z_'); low_triple=$(echo "$triple" | tr '-' '_'); \
    export "CARGO_TARGET_${env_triple}_LINKER=${gcc}-gcc" "CC_${low_triple}=${gcc}-gcc" \
      "AR_${low_triple}=${gcc}-ar"; \
    cargo build --release --locked -p sluice --target "$triple"; \
    cp "target/$triple/release/sluice" /sluice; \
    setcap cap_net_bind_service=+ep /sluice; \
    getcap /sluice | grep -q cap_net_bind_service

# The same Debian release as the build stage (its glibc).
FROM debian:12.12-slim
# BuildKit's COPY keeps extended attributes, and with them the `security.capability` xattr
# set above (the legacy builder, DOCKER_BUILDKIT=0, drops it: the binary would then fail to
# bind :80 in the DaemonSet).
COPY --from=build /sluice /sluice
USER 65532:65532
EXPOSE 80 443 8080 8443 10254
ENTRYPOINT ["/sluice"]
CMD ["controller"]
