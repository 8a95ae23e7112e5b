//! Compiles `proto/relay.proto` with the vendored protoc (no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Build scripts run single-threaded; nothing else reads the environment.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/relay.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .bytes(".")
        .compile_protos(&["proto/relay.proto"], &["proto"])?;
    Ok(())
}
