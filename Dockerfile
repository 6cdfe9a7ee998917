# A static sluice binary (musl) in an empty image.
#   docker build -t sluice:0.1.0 .     (the tag deploy/ pins: the workspace version)
#
# Needs BuildKit (the default builder since Docker 23): see the COPY below.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools libcap2-bin \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# The file capability lets the non-root process bind ports 80 and 443. The DaemonSet runs
# as uid 65532 with `capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}` and
# `allowPrivilegeEscalation: false` (no_new_privs): the runtime puts NET_BIND_SERVICE in
# the bounding, permitted and effective sets before exec, but a non-root process loses its
# permitted set across execve unless the executed file carries the capability itself. With
# no_new_privs the file capability grants nothing beyond what the runtime already allowed,
# so this adds no privilege; without it the pod fails with "Permission denied" on :80.
# (ingress-nginx's image does the same.) crates/sluice/tests/unprivileged_bind.rs runs the
# binary exactly this way.
RUN cargo build --release --locked -p sluice --target x86_64-unknown-linux-musl \
 && cp target/x86_64-unknown-linux-musl/release/sluice /sluice \
 && setcap cap_net_bind_service=+ep /sluice \
 && getcap /sluice | grep -q cap_net_bind_service

FROM scratch
# BuildKit's COPY keeps extended attributes, and with them the `security.capability` xattr
# set above (the legacy builder, DOCKER_BUILDKIT=0, drops it: the binary would then fail to
# bind :80 in the DaemonSet). `scratch` has no setcap to set it here instead.
COPY --from=build /sluice /sluice
USER 65532:65532
EXPOSE 80 443 8080 8443 10254
ENTRYPOINT ["/sluice"]
CMD ["controller"]
