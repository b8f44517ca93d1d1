// Dynamic Resource Allocation (resource.k8s.io/v1) as Gantry reads it: the GPUs and MIG
// devices NVIDIA's DRA driver publishes in ResourceSlices, the DeviceClasses and
// ResourceClaims pods name, and the supported subset of CEL device selectors
// (docs/kubernetes.md, "Dynamic Resource Allocation").
//
// Gantry allocates the devices of one driver, gpu.nvidia.com: a claim's requests become
// the pod's whole GPUs or one MIG device, its selectors a condition on the node's devices
// (so a pod's node selection includes its claims), and the core's choice of GPUs (and MIG
// placement) inside the node becomes the claim's allocation, device by device.
//
// CEL: no CEL library is packaged for Debian 12 (cel-cpp needs Abseil and Protobuf builds
// of its own), and a selector here is &&, || and ! of a few comparison forms, so the
// subset is parsed here; anything outside it is refused with a message naming it.
// Parsing never throws: a malformed object is a value with `problem` set.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/result.h"

namespace gantry::kube {

// The driver whose devices Gantry allocates, and its attributes Gantry reads.
inline constexpr const char* kGpuDriver = "gpu.nvidia.com";
// No attribute names the NVLink domain of a GPU inside a node; Gantry reads this int one
// (gpu.nvidia.com/nvlinkDomain). GPUs without it are one domain.
inline constexpr const char* kNvlinkDomainAttribute = "gpu.nvidia.com/nvlinkDomain";

// An attribute's value: int, bool, string (version values are kept as strings).
using AttributeValue = std::variant<int64_t, bool, std::string>;

struct DraDevice {
  std::string name;
  std::map<std::string, AttributeValue> attributes;  // fully qualified: "gpu.nvidia.com/type"
  std::map<std::string, int64_t> capacity;           // fully qualified, in base units
  std::vector<int> memory_slices;                    // counters memory-slice-<k> it consumes
  bool operator==(const DraDevice&) const = default;
};

// A ResourceSlice (one node's devices of one driver's pool).
struct SliceInfo {
  std::string name, driver, pool, node;
  int64_t generation = 0;
  std::vector<DraDevice> devices;
  std::string problem;
};
SliceInfo ParseSlice(const nlohmann::json& obj);

// A compiled device selector: a conjunction of comparisons on a device's driver,
// attributes and capacity.
class DeviceSelector {
 public:
  // The subset: comparisons joined by &&, || and ! (parentheses allowed), each one of
  //   device.driver == 'x'
  //   device.attributes['domain'].name  (== | !=)  'text' | 12 | true
  //   device.attributes['domain'].name  (< | <= | > | >=)  12
  //   device.attributes['domain'].name in ['a', 'b']
  //   device.capacity['domain'].name.compareTo(quantity('40Gi'))  (op)  0
  //   device.capacity['domain'].name.isGreaterThan(quantity('40Gi'))  (and isLessThan)
  // An error names the column and what was expected. As in CEL, a comparison on an
  // attribute the device lacks is an error, which || and && absorb where the other side
  // decides and which otherwise matches nothing.
  static Result<DeviceSelector> Compile(std::string_view expression);
  bool Matches(const std::string& driver, const DraDevice& d) const;
  // The value the selector pins an attribute (or the driver, "") to with == at its top
  // level (a comparison every match passes), if it does.
  std::optional<AttributeValue> Pinned(const std::string& attribute) const;

  struct Term {
    enum class Lhs : uint8_t { kDriver, kAttribute, kCapacity } lhs = Lhs::kDriver;
    std::string key;  // fully qualified attribute or capacity name
    std::string op;   // == != < <= > >= in
    std::vector<AttributeValue> values;
  };
  // A comparison, or &&, || or ! of expressions.
  struct Expr {
    enum class Kind : uint8_t { kTerm, kAnd, kOr, kNot } kind = Kind::kTerm;
    Term term;
    std::vector<Expr> kids;
  };

 private:
  Expr root_;
};

// A DeviceClass: its selectors.
struct ClassInfo {
  std::string name;
  std::vector<std::string> selectors;  // CEL expressions
};
ClassInfo ParseClass(const nlohmann::json& obj);

// A ResourceClaim: what it asks and how it is allocated now.
struct ClaimRequest {
  std::string name, device_class;
  std::vector<std::string> selectors;
  int64_t count = 1;
  std::string unsupported;  // allocationMode All, firstAvailable, adminAccess, capacity
};
struct AllocatedDevice {
  std::string request, driver, pool, device;
};
struct ClaimInfo {
  std::string ns, name, uid, resource_version;
  std::vector<ClaimRequest> requests;
  std::vector<std::string> match_attributes;  // constraints[].matchAttribute
  std::string unsupported;                    // other constraints, config for other drivers
  bool allocated = false;
  std::vector<AllocatedDevice> devices;  // status.allocation.devices.results
  // The node the allocation's nodeSelector names (matchFields metadata.name), if it does.
  std::string node;
  // status.reservedFor's pods, in order: uids and names. The first is the pod the claim
  // was allocated for (a scheduler writes it with the allocation; pods that share the
  // claim are added after it).
  std::vector<std::string> reserved_for, reserved_names;
  std::string problem;
};
ClaimInfo ParseClaim(const nlohmann::json& obj);

// What a pod's claims ask of one node, resolved against their classes: whole GPUs or one
// MIG device of a profile, the selectors every such device must pass, and whether its GPUs
// must share an NVLink domain. An error says what the claim must change.
struct DeviceAsk {
  int64_t gpus = 0;
  std::string mig_profile;
  std::vector<std::string> selectors;  // the classes' and requests', as given
  bool one_domain = false;
  // Per claim (as the pod names them, in order): its requests and how many devices each.
  struct Part {
    std::string claim;  // the ResourceClaim's name
    std::string uid, resource_version;
    std::vector<std::pair<std::string, int64_t>> requests;
  };
  std::vector<Part> parts;
};
Result<DeviceAsk> AskOf(const std::vector<const ClaimInfo*>& claims,
                        const std::map<std::string, ClassInfo>& classes);

// A node's devices of gpu.nvidia.com, from its slices (the newest generation of each pool):
// GPUs ordered by their `index` attribute, and the MIG devices each GPU can be split into
// (partitionable devices: their memory-slice counters give the placement).
struct NodeGpus {
  std::string pool;             // the driver's pool of the node's GPUs
  std::vector<DraDevice> gpus;  // type gpu, by index
  std::vector<DraDevice> migs;  // type mig
  std::vector<int> mig_parent;  // per mig: its GPU's position in `gpus`
  int nvlink_domains = 1;       // distinct nvlinkDomain values, if they split the GPUs evenly
  std::string product;          // productName of the GPUs
  std::string problem;          // why they (or their MIG devices) are not offered, if so
  bool operator==(const NodeGpus&) const = default;
};
NodeGpus GpusOf(const std::vector<const SliceInfo*>& slices);

// Whether every device of the node of the asked kind (GPUs, or MIG devices of the
// profile) passes all `selectors`.
bool DevicesPass(const NodeGpus& node, const std::vector<std::string>& selectors,
                 const std::string& mig_profile);
// The same with the selectors compiled once (CompileAll), for a walk over many nodes.
bool DevicesPassCompiled(const NodeGpus& node, const std::vector<DeviceSelector>& selectors,
                         const std::string& mig_profile);
// Every expression compiled; nullopt if one is outside the subset (it passes no device).
std::optional<std::vector<DeviceSelector>> CompileAll(const std::vector<std::string>& selectors);

// The claim status a binding writes first: the devices, per claim part in order, reserved
// for the pod, on `node` (a merge patch with the claim's resourceVersion as precondition).
// The claim status a binding writes first when its pod shares `claim`, allocated for
// another pod already: reservedFor with the pod added at the end (a merge patch with the
// claim's resourceVersion as precondition, so two pods added at once cannot lose one).
nlohmann::json ReservationPatch(const ClaimInfo& claim, const std::string& pod_name,
                                const std::string& pod_uid);
nlohmann::json AllocationPatch(const DeviceAsk::Part& part, const std::vector<std::string>& devices,
                               const std::string& pool, const std::string& node,
                               const std::string& pod_name, const std::string& pod_uid);

}  // namespace gantry::kube
