// ImageReferenceProblem: whether a container image name is a plain registry reference
// (docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime, localhost/app:1, name@sha256:...),
// the grammar of distribution/reference, and nothing podman would read from the node's
// files: its other transports (dir:, oci-archive:, docker-archive:, oci:, ...) name paths,
// and rootful podman reads them as root, so a job naming `oci-archive:x.tar` beside a
// symlink to root's file would get that file back as its image. Shared by the job reader
// (gantryd refuses such a job) and gantry-agent (which refuses to run one).
// Thread-safety: pure function.
#pragma once

#include <regex>
#include <string>
#include <string_view>

namespace gantry {

// Empty when `image` is a plain reference; else why not ("is empty", "names podman's ...").
inline std::string ImageReferenceProblem(std::string_view image) {
  if (image.empty()) return "is empty";
  // (Before the regex: libstdc++'s recurses per character, and a name is at most 255.)
  if (image.size() > 512) return "is longer than 512 characters";
  std::string_view rest = image;
  if (rest.starts_with("docker://")) rest.remove_prefix(9);
  for (std::string_view transport :
       {"containers-storage:", "dir:", "docker-archive:", "docker-daemon:", "docker:", "oci:",
        "oci-archive:", "ostree:", "sif:", "tarball:"}) {
    if (rest.starts_with(transport)) {
      return "names podman's " + std::string(transport.substr(0, transport.size() - 1)) +
             " transport, which reads files on the node; only registry images are run";
    }
  }
  // distribution/reference: [domain[:port]/]path-component(/path-component)*[:tag][@digest]
  static const std::regex kReference(
      R"(^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?)"
      R"([a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
      R"((?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$)");
  if (!std::regex_match(rest.begin(), rest.end(), kReference))
    return "is not [REGISTRY/]NAME[:TAG][@DIGEST]";
  return "";
}

// An image as NVIDIA's pyxis (enroot) names it in `--container-image`, as podman names it:
// `[docker://][REGISTRY#]IMAGE[:TAG]` (`nvcr.io#nvidia/pytorch:24.01-py3`). A reference
// podman's way (`nvcr.io/nvidia/pytorch:24.01-py3`) comes back as it is, and a short name
// (`ubuntu:22.04`) too: podman resolves it (the node's images, then registries.conf's
// search registries) where enroot would take Docker Hub. Enroot's squashfs files and
// `USER@REGISTRY` credentials have no podman equivalent: `*why` says so and "" comes back.
inline std::string PyxisImage(std::string_view image, std::string* why) {
  std::string_view rest = image;
  if (rest.starts_with("docker://")) rest.remove_prefix(9);
  if (rest.empty()) {
    *why = "give an image, e.g. nvcr.io#nvidia/pytorch:24.01-py3";
    return "";
  }
  if (rest.starts_with("/") || rest.starts_with("./") || rest.ends_with(".sqsh")) {
    *why =
        "an enroot squashfs file: podman runs images from a registry (or the node's image "
        "store, localhost/NAME); give its registry reference";
    return "";
  }
  const size_t hash = rest.find('#');
  if (hash == std::string_view::npos) return std::string(rest);
  const std::string_view registry = rest.substr(0, hash);
  if (registry.find('@') != std::string_view::npos) {
    *why =
        "USER@REGISTRY: credentials in the image name are enroot's; give the registry alone "
        "(the node's podman login holds credentials)";
    return "";
  }
  return std::string(registry) + "/" + std::string(rest.substr(hash + 1));
}

}  // namespace gantry
