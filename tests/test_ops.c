/* test_ops.c - being written */
int main(void)
{
    return 0;
}
