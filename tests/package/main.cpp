/** \file main.cpp
 * Uses the installed library the way an application would: compile a spec, print its verdicts, run
 * the derived plan and check it against the reference.
 */
#include <iostream>

#include "driver/Compiler.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        std::cerr << "usage: consumer SPEC\n";
        return 2;
    }
    rf::ArenaScope arena;
    auto c = rf::compile_file(argv[1], {});
    for (const rf::ChainPlan &chain : c->plan.chains)
        for (const rf::MemberAnalysis &m : chain.verdicts)
            std::cout << m.name << ": " << rf::relation_name(m.relation) << "\n";
    rf::RunOptions o;
    o.check = true;
    rf::RunReport r = rf::run_compiled(*c, o);
    std::cout << r.text;
    return r.ok ? 0 : 1;
}
