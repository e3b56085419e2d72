/** \file arena_memo_test.cpp
 * Arena::thread_memo: one memo per arena, thread and factory, destroyed with its arena.
 */
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "ir/Expr.h"

using namespace rf;

namespace {

int live_memos = 0;

struct Counted : ArenaMemo {
    Counted() { live_memos++; }
    ~Counted() override { live_memos--; }
    int value = 0;
};

std::unique_ptr<ArenaMemo> make_counted() { return std::make_unique<Counted>(); }
std::unique_ptr<ArenaMemo> make_other() { return std::make_unique<Counted>(); }

TEST(ArenaMemo, OnePerArenaThreadAndFactory) {
    {
        ArenaScope scope;
        Arena &a = scope.arena();
        ArenaMemo &m1 = a.thread_memo(&make_counted);
        EXPECT_EQ(&a.thread_memo(&make_counted), &m1);
        EXPECT_NE(&a.thread_memo(&make_other), &m1);
        const ArenaMemo *from_thread = nullptr;
        std::thread t([&] { from_thread = &a.thread_memo(&make_counted); });
        t.join();
        EXPECT_NE(from_thread, &m1);
        {
            ArenaScope inner;
            EXPECT_NE(&inner.arena().thread_memo(&make_counted), &m1);
            EXPECT_EQ(live_memos, 4);
        }
        EXPECT_EQ(live_memos, 3);
    }
    EXPECT_EQ(live_memos, 0);
}

TEST(ArenaMemo, ANewArenaStartsWithANewMemo) {
    std::optional<ArenaScope> scope;
    scope.emplace();
    static_cast<Counted &>(scope->arena().thread_memo(&make_counted)).value = 42;
    scope.reset();
    EXPECT_EQ(live_memos, 0);
    scope.emplace();
    EXPECT_EQ(static_cast<Counted &>(scope->arena().thread_memo(&make_counted)).value, 0);
}

}  // namespace
