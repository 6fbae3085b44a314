# The lake and lake-operator images, from one build:
#   docker build --target lake -t ghcr.io/acme/lake:0.1.0 .
#   docker build --target lake-operator -t ghcr.io/acme/lake-operator:0.1.0 .
# Both run as the distroless `nonroot` user (65532, the uid the operator's pods run as), with no
# shell and no package manager; the binaries need only glibc, which the base provides.

FROM rust:1.95-bookworm AS build
# lance's build needs protoc and the well-known .proto files; mold links faster.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev mold \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p lake-runtime -p lake-operator \
 && mkdir -p /out \
 && cp target/release/lake target/release/lake-operator /out/

FROM gcr.io/distroless/cc-debian12:nonroot AS lake
COPY --from=build /out/lake /usr/local/bin/lake
USER 65532:65532
EXPOSE 8815 8816
ENTRYPOINT ["/usr/local/bin/lake"]
CMD ["serve"]

FROM gcr.io/distroless/cc-debian12:nonroot AS lake-operator
COPY --from=build /out/lake-operator /usr/local/bin/lake-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/lake-operator"]
CMD ["run"]
