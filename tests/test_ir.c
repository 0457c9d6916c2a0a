/* test_ir.c: the op table, graph builders, the verifier's rules and the
 * memory planner. Each broken rule must be an error naming the tensor or
 * node and the rule. */
#include "harness.h"
#include "ir/ops.h"
#include "compiler/passes.h"
#include "ir/liveness.h"

static float g_w[64 * 64];

/* A small valid module: x = get_rows(emb, tokens); y = matmul(x, w);
 * z = rms_norm(y, n); out = logits(z, emb). */
static int build(kiln_module *m) {
    memset(m, 0, sizeof *m);
    int64_t emb[2] = {50, 16}, w[2] = {16, 16}, n[1] = {16};
    if (kiln_module_add_const(m, "emb", KILN_F32, 2, emb, g_w) < 0) return -1;
    if (kiln_module_add_const(m, "w", KILN_F32, 2, w, g_w) < 0) return -1;
    if (kiln_module_add_const(m, "n", KILN_F32, 1, n, g_w) < 0) return -1;
    kiln_graph *g = kiln_module_add_method(m, "run", 8);
    int64_t t[1] = {8};
    int tok = kiln_graph_input(g, "tokens", KILN_I32, 1, t, 1);
    int x = kiln_graph_node(g, m, KILN_OP_GET_ROWS, "x", 2,
                            (int32_t[]){kiln_graph_const(g, m, "emb"), tok}, NULL, NULL);
    int y = kiln_graph_node(g, m, KILN_OP_MATMUL, "y", 2,
                            (int32_t[]){x, kiln_graph_const(g, m, "w")}, NULL, NULL);
    float eps[4] = {1e-5f};
    int z = kiln_graph_node(g, m, KILN_OP_RMS_NORM, "z", 2,
                            (int32_t[]){y, kiln_graph_const(g, m, "n")}, NULL, eps);
    int o = kiln_graph_node(g, m, KILN_OP_LOGITS, "out", 2,
                            (int32_t[]){z, kiln_graph_const(g, m, "emb")}, NULL, NULL);
    if (tok < 0 || x < 0 || y < 0 || z < 0 || o < 0) return -1;
    int b;
    kiln_module_add_backend(m, "ref", &b);
    return kiln_graph_output(g, o);
}

static int find_value(const kiln_graph *g, const char *name) {
    for (int i = 0; i < g->n_values; i++)
        if (!strcmp(g->values[i].name, name)) return i;
    return -1;
}

TEST(op_table_is_complete) {
    for (int op = 0; op < KILN_OP_COUNT; op++) {
        const kiln_op_info *i = kiln_op_get(op);
        ASSERT(i && i->name && i->shape && i->min_in >= 1 && i->max_in >= i->min_in);
        ASSERT_EQ_I(kiln_op_from_name(i->name), op);
    }
    ASSERT(kiln_op_get(KILN_OP_COUNT) == NULL);
    ASSERT(kiln_op_get(-1) == NULL);
    ASSERT_EQ_I(kiln_op_from_name("conv2d"), -1);
}

TEST(valid_module_verifies_and_plans) {
    kiln_module m;
    ASSERT_OK(build(&m));
    ASSERT_OK(kiln_module_verify(&m, 0));
    ASSERT_OK(kiln_graph_partition(&m.methods[0]));
    ASSERT_OK(kiln_graph_plan(&m.methods[0], &m));
    ASSERT_OK(kiln_module_verify(&m, 1));
    /* x and z can share memory (x is dead once y exists): the arena is
     * smaller than the sum of all activations. */
    const kiln_graph *g = &m.methods[0];
    uint64_t sum = 0;
    for (int i = 0; i < g->n_values; i++)
        if (kiln_value_in_arena(&g->values[i]))
            sum += kiln_shape_bytes(g->values[i].dtype, g->values[i].ndim, g->values[i].ne);
    ASSERT_MSG(g->scratch_offset < sum, "arena %llu not below the sum %llu",
               (unsigned long long)g->scratch_offset, (unsigned long long)sum);
    kiln_module_free(&m);
}

TEST(builder_rejects_bad_shapes) {
    kiln_module m;
    memset(&m, 0, sizeof m);
    int64_t w[2] = {16, 12};
    ASSERT(kiln_module_add_const(&m, "w", KILN_F32, 2, w, g_w) >= 0);
    kiln_graph *g = kiln_module_add_method(&m, "run", 4);
    int64_t x[2] = {4, 16};
    int in = kiln_graph_input(g, "x", KILN_F32, 2, x, 1);
    int v = kiln_graph_node(g, &m, KILN_OP_MATMUL, "blk.0.attn_q", 2,
                            (int32_t[]){in, kiln_graph_const(g, &m, "w")}, NULL, NULL);
    ASSERT_EQ_I(v, -1);
    ASSERT_CONTAINS(kiln_last_error(), "node 'blk.0.attn_q' (matmul)");
    ASSERT_CONTAINS(kiln_last_error(), "weight has 12 inputs per row but x has width 16");
    /* A constant of a block type whose rows are not whole blocks. */
    int64_t q[2] = {4, 40};
    ASSERT_EQ_I(kiln_module_add_const(&m, "q", KILN_Q4_0, 2, q, g_w), -1);
    ASSERT_CONTAINS(kiln_last_error(), "constant 'q': rows of 40 are not whole q4_0 blocks of 32");
    /* A constant with no data at all: the bug that once segfaulted a compiler. */
    ASSERT_EQ_I(kiln_module_add_const(&m, "pos", KILN_I32, 1, q, NULL), -1);
    ASSERT_CONTAINS(kiln_last_error(), "constant 'pos' has no data");
    kiln_module_free(&m);
}

/* Each mutation breaks one rule; the verifier must say which. */
typedef void (*mutate_fn)(kiln_module *m);
static void m_undeclared_input(kiln_module *m) {
    m->methods[0].n_inputs = 0;
}
static void m_use_before_def(kiln_module *m) {
    kiln_node t = m->methods[0].nodes[1];
    m->methods[0].nodes[1] = m->methods[0].nodes[2];
    m->methods[0].nodes[2] = t;
}
static void m_bad_shape(kiln_module *m) {
    m->methods[0].values[find_value(&m->methods[0], "y")].ne[1] = 17;
}
static void m_bad_dtype(kiln_module *m) {
    m->methods[0].values[find_value(&m->methods[0], "z")].dtype = KILN_F16;
}
static void m_produced_twice(kiln_module *m) {
    m->methods[0].nodes[2].out = m->methods[0].nodes[1].out;
}
static void m_orphan(kiln_module *m) {
    m->methods[0].nodes[1].in[0] = m->methods[0].nodes[3].out;
}
static void m_const_no_data(kiln_module *m) {
    m->consts[1].data = NULL;
}
static void m_input_out_of_range(kiln_module *m) {
    m->methods[0].nodes[0].in[1] = 999;
}
static void m_const_as_input(kiln_module *m) {
    /* A graph input taken for a constant: its kind says const, its ref is bogus. */
    kiln_value *v = &m->methods[0].values[find_value(&m->methods[0], "tokens")];
    v->kind = KILN_VAL_CONST;
    v->ref = 7;
    v->dyn_mask = 0;
}
static void m_bad_op(kiln_module *m) {
    m->methods[0].nodes[2].op = 99;
}
static void m_bad_attr(kiln_module *m) {
    m->methods[0].nodes[0].n_in = 3;
}
static void m_no_outputs(kiln_module *m) {
    m->methods[0].n_outputs = 0;
}

TEST(verifier_names_each_broken_rule) {
    static const struct {
        mutate_fn f;
        const char *expect;
    } cases[] = {
        {m_undeclared_input, "tensor 'tokens' is used as a graph input but not declared as one"},
        {m_use_before_def, "node 'z' uses tensor 'y' before any node produces it"},
        {m_bad_shape,
         "node 'y' (matmul) declares output f32 [8, 17] but its inputs give f32 [8, 16]"},
        {m_bad_dtype, "node 'z' (rms_norm) declares output f16"},
        {m_produced_twice, "tensor 'y' is produced twice"},
        {m_orphan, "uses tensor 'out' before any node produces it"},
        {m_const_no_data, "constant 'w' has no data"},
        {m_input_out_of_range, "node 'x' input 1 refers to value 999"},
        {m_const_as_input, "value 'tokens' refers to constant 7 of 3"},
        {m_bad_op, "node 'z' has unknown op 99"},
        {m_bad_attr, "node 'x' (get_rows) has 3 inputs, the op takes 2..2"},
        {m_no_outputs, "method 'run' has no outputs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kiln_module m;
        ASSERT_OK(build(&m));
        cases[i].f(&m);
        kiln_status st = kiln_module_verify(&m, 0);
        ASSERT_MSG(st == KILN_ERR_FORMAT, "case %zu: status %d", i, st);
        ASSERT_CONTAINS(kiln_last_error(), cases[i].expect);
        kiln_module_free(&m);
    }
}

TEST(verifier_checks_the_memory_plan) {
    kiln_module m;
    ASSERT_OK(build(&m));
    kiln_graph *g = &m.methods[0];
    ASSERT_OK(kiln_graph_partition(g));
    ASSERT_OK(kiln_graph_plan(g, &m));
    /* Put y where x lives: both are alive while y is computed. */
    int x = find_value(g, "x"), y = find_value(g, "y");
    g->values[y].offset = g->values[x].offset;
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "tensors 'x' and 'y' are alive at once but overlap");
    ASSERT_OK(kiln_graph_plan(g, &m));
    g->values[y].offset = g->scratch_offset; /* past the planned bytes */
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "past the planned");
    ASSERT_OK(kiln_graph_plan(g, &m));
    g->nodes[0].backend = 3;
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "names backend 3 of 1");
    kiln_module_free(&m);
}

TEST(runtime_shape_rules_use_data) {
    /* logits keeps one row when the flag is 0 and all rows when it is 1. */
    kiln_node n = {0};
    n.op = KILN_OP_LOGITS;
    n.n_in = 3;
    int32_t flag = 0;
    kiln_tensor x = {KILN_F32, 2, {5, 16}, NULL}, w = {KILN_F32, 2, {50, 16}, NULL},
                f = {KILN_I32, 1, {1}, &flag}, out;
    const kiln_tensor *in[3] = {&x, &w, &f};
    char err[200];
    ASSERT_EQ_I(kiln_op_get(KILN_OP_LOGITS)->shape(&n, in, &out, err, sizeof err), 0);
    ASSERT_EQ_I(out.ne[0], 1);
    flag = 1;
    ASSERT_EQ_I(kiln_op_get(KILN_OP_LOGITS)->shape(&n, in, &out, err, sizeof err), 0);
    ASSERT_EQ_I(out.ne[0], 5);
    ASSERT_EQ_I(out.ne[1], 50);
}

/* Partitions: the maximal runs of one backend, each with what it reads from
 * outside (no constants) and what later nodes read of it; the verifier
 * refuses a table that says otherwise. */
TEST(partitions_are_maximal_runs_with_their_boundaries) {
    kiln_module m;
    ASSERT_OK(build(&m));
    kiln_graph *g = &m.methods[0];
    int cpu;
    ASSERT_OK(kiln_module_add_backend(&m, "cpu", &cpu));
    g->nodes[1].backend = g->nodes[2].backend = cpu; /* y, z on cpu: ref | cpu cpu | ref */
    ASSERT_OK(kiln_graph_partition(g));
    ASSERT_OK(kiln_graph_plan(g, &m));
    ASSERT_OK(kiln_module_verify(&m, 1));
    ASSERT_EQ_I(g->n_parts, 3);
    ASSERT_EQ_I(g->parts[1].first, 1);
    ASSERT_EQ_I(g->parts[1].n_nodes, 2);
    ASSERT_EQ_I(g->parts[1].backend, cpu);
    int x = find_value(g, "x"), z = find_value(g, "z"), o = find_value(g, "out");
    ASSERT_EQ_I(g->parts[1].n_in, 1); /* x; the weights w and n are not listed */
    ASSERT_EQ_I(g->parts[1].in[0], x);
    ASSERT_EQ_I(g->parts[1].n_out, 1); /* z, read by out; y stays inside */
    ASSERT_EQ_I(g->parts[1].out[0], z);
    ASSERT_EQ_I(g->parts[0].n_in, 1); /* the tokens */
    ASSERT_EQ_I(g->parts[2].n_out, 1);
    ASSERT_EQ_I(g->parts[2].out[0], o); /* the method's output */
    ASSERT_EQ_I(g->parts[0].blob, -1);
    /* a boundary that is not what the nodes read */
    g->parts[1].n_out = 0;
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "partition 1's boundary");
    g->parts[1].n_out = 1;
    /* a blob that is not there */
    g->parts[1].blob = 0;
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "names blob 0");
    g->parts[1].blob = -1;
    /* not maximal: all on ref, but the old table kept */
    g->nodes[1].backend = g->nodes[2].backend = 0;
    g->parts[1].backend = 0;
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "maximal run");
    /* nodes left out */
    ASSERT_OK(kiln_graph_partition(g));
    ASSERT_EQ_I(g->n_parts, 1);
    g->n_parts = 0;
    ASSERT_EQ_I(kiln_module_verify(&m, 1), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "cover 0 of its 4 nodes");
    g->n_parts = 1;
    kiln_module_free(&m);
}

TEST_MAIN(op_table_is_complete, valid_module_verifies_and_plans, builder_rejects_bad_shapes,
          verifier_names_each_broken_rule, verifier_checks_the_memory_plan,
          runtime_shape_rules_use_data, partitions_are_maximal_runs_with_their_boundaries)
