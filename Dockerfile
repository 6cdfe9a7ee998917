# A static sluice binary (musl) in an empty image.
#   docker build -t sluice:latest .
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p sluice --target x86_64-unknown-linux-musl \
 && cp target/x86_64-unknown-linux-musl/release/sluice /sluice

FROM scratch
COPY --from=build /sluice /sluice
USER 65532:65532
EXPOSE 8080 8443 10254
ENTRYPOINT ["/sluice"]
CMD ["controller"]
