#include "server/auth.h"

#include <gtest/gtest.h>

namespace gantry::server {
namespace {

TEST(Auth, Sha256KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Auth, TokensAreLongRandomAndDistinct) {
  const std::string a = NewToken(), b = NewToken();
  EXPECT_EQ(a.rfind("gty_", 0), 0u);
  EXPECT_EQ(a.size(), 4u + 64u);
  EXPECT_NE(a, b);
}

TEST(Auth, BearerToken) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("Bearer abc  "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(Auth, TeamsUseTheirQueuesAndTheirDescendants) {
  std::vector<core::QueueSpec> specs = {
      {"ml", "", 8 * core::kGpuUnits, -1, 1.0, {}, {}, false, {}, {}, {}, {}},
      {"research", "ml", 4 * core::kGpuUnits, -1, 1.0, {}, {}, false, {}, {}, {}, {}},
      {"serving", "", 0, -1, 1.0, {}, {}, false, {}, {}, {}, {}}};
  auto tree = core::QueueTree::Build(specs);
  ASSERT_TRUE(tree.ok());
  Principal team;
  team.role = Role::kTeam;
  team.team = "ml";
  team.queues = {"ml"};
  EXPECT_TRUE(MaySubmitTo(team, *tree, "ml"));
  EXPECT_TRUE(MaySubmitTo(team, *tree, "research"));
  EXPECT_FALSE(MaySubmitTo(team, *tree, "serving"));
  EXPECT_FALSE(MaySubmitTo(team, *tree, "nosuch"));
  Principal admin;
  admin.role = Role::kAdmin;
  EXPECT_TRUE(MaySubmitTo(admin, *tree, "serving"));
  Principal agent;
  agent.role = Role::kAgent;
  EXPECT_FALSE(MaySubmitTo(agent, *tree, "serving"));
}

}  // namespace
}  // namespace gantry::server
